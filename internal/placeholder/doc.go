// Package placeholder makes the stand-in credentials an app is given
// instead of the real secrets, and recognises them in requests.
//
// For each secret_ref of the policy, [Derive] makes a placeholder with the
// shape of the real value: the same length, the same prefix up to and
// including the last '-' or '_' within the first 12 characters ("sk-proj-",
// "ghp_", "xoxb-"), and at every other position a character of the same
// class (upper-case letter, lower-case letter, digit) while every other
// byte ('.', '-', '+', …) is kept, so that an SDK's format check passes. The
// random characters come from HMAC-SHA256 keyed by a per-Pod random key,
// over the secret_ref and the shape only: the value's bytes never enter the
// derivation beyond their class, so a placeholder says nothing about the
// value but its shape, the same shape gives the same placeholder across
// restarts and rotations, and a placeholder is never the value (it is
// re-derived if it were). A shape with under [MinBits] bits of random
// characters gets no placeholder ([ErrWeakShape]): such a string could turn
// up in ordinary text and trip by accident.
//
// A [Manager] owns the directory the app mounts: the key (".key", 0600),
// one file per secret_ref holding its placeholder (0444) and an "env" file
// of NAME=placeholder lines (names from secretref.EnvName), every write
// atomic (temporary file, then rename). [Manager.Update] re-derives after a
// secret rotation or a configuration reload and publishes an immutable
// [Table].
//
// A Table is what the request path uses: [Table.Find] reports the first
// placeholder of a secret a request may not carry, in any of the forms
// listed at [Form] (as is, percent-encoded, JSON-escaped, inside standard
// or URL-safe base64 at any alignment: Basic auth); [Table.InspectName]
// does the same for a host or DNS name (as is, case-insensitively);
// [Table.FindHeader] and [Table.FindURL] judge each header and URL part
// on its own. Nothing here puts a real value into a request: the real key
// goes only where a rule's header_rewrites or query_rewrites put it
// (package rewrite), which replace the app's header or parameter whole; a
// placeholder is accepted only there. Placeholders the process issued
// before a shape-changing rotation stay in the table (at most
// [maxRetired] per secret_ref), so an app started with an older env file
// is still accepted there and still trips elsewhere.
//
// Outside package secrets, this package and package rewrite are the only
// ones that call secrets.Value.Reveal: to learn a value's shape. Errors and logs name secret_refs, never values or
// placeholders.
//
// Typical use:
//
//	m, err := placeholder.Open(placeholder.Options{Dir: cfg.Placeholders.Dir, Logger: log})
//	err = m.Update(cfg.RequiredSecretRefs(), store.Snapshot()) // at start, on rotation, on reload
//	if ref, form, found := m.Table().Find(body, allowed); found { … } // per request
package placeholder
