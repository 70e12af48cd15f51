// Package secrets holds the credentials BotBox injects into upstream requests.
//
// A [Store] mirrors one directory, normally a Kubernetes Secret volume: every
// regular file directly inside it is one secret, its name the key and its
// content the value. The store publishes an immutable [Snapshot] through an
// atomic pointer; a request takes one snapshot and looks keys up in it, so a
// reload never blocks a reader and a request never sees half of a rotation.
// Values are [Value]s, which print as REDACTED through fmt, log/slog,
// encoding/json and encoding; only [Value.Reveal] returns the bytes.
//
// Loading goes through [os.Root], so a symlink can never lead outside the
// directory. Symlinks that stay inside are followed, which is what the
// Kubernetes layout needs (key -> ..data/key, ..data -> ..2024_01_01_xx/).
// Names starting with a dot (..data, ..2024_…, .hidden) are not keys. A file
// that cannot be used (unreadable, not UTF-8, over 1 MiB) is skipped with a
// warning naming its key; the other files still load and the key keeps its
// last-known-good value, if it had one. Exactly one trailing "\n" or "\r\n"
// is removed from each value.
//
// [Store.Run] keeps the snapshot current through package volwatch: an
// fsnotify watch on the directory schedules a debounced reload on any event
// (Kubernetes swaps ..data atomically), and a periodic full resync catches
// anything the watch misses. The watch survives the directory being created
// late or being removed and re-created. While the directory is gone the store keeps serving the
// last-known-good values, because a proxy that drops every credential on a
// transient unmount fails every request; when the directory is back, the
// snapshot mirrors exactly what is in it again. (This covers a directory
// that vanishes as a unit — unmounted, renamed, replaced. A recursive
// delete removes the files first, and a reload that runs half way through
// sees them go one by one, like any other deletion.)
//
// Readiness ([Store.Ready]) means every required key is present. It is
// recomputed after each reload and after [Store.SetRequired] (a
// configuration reload that adds or drops a secret_ref), and reported
// through [Options.OnReady] as soon as it changes, not by polling.
//
// The package never logs, wraps into an error, or otherwise prints a secret
// value; logs name keys only. It does not decide which secrets a request gets
// (package rewrite does) and does not zero memory: Go cannot promise that
// copies made by the runtime are wiped.
//
// Typical use:
//
//	store, err := secrets.Open(secrets.Options{
//		Dir:      cfg.SecretsDir,
//		Required: cfg.RequiredSecretRefs(),
//		Logger:   logger,
//		OnReady:  ready.Store,
//	})
//	if err != nil {
//		return err
//	}
//	g.Go(func() error { return store.Run(ctx) })
//	…
//	v, ok := store.Snapshot().Lookup("openai-api-key")
package secrets
