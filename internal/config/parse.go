package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"reflect"
	"sort"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/botbox/botbox/internal/echo"
)

// Load reads the file at path and parses it with Parse. A file that does not
// exist is reported as "config file not found: PATH" (the error wraps
// fs.ErrNotExist); any other read error as "reading config file PATH: ...".
// Neither holds a *FieldError, so Problems(err) is empty exactly when the
// file could not be read. The problems of Parse are returned as Parse
// returns them (joined, one per line), so that callers can list them (see
// Problems) under their own heading naming the file.
func Load(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, &notFoundError{path: path, err: err}
		}
		return nil, fmt.Errorf("reading config file %s: %w", path, err)
	}
	return Parse(data)
}

// notFoundError is Load's error for a missing file: the path once, without
// the "open PATH: no such file or directory" repetition.
type notFoundError struct {
	path string
	err  error
}

func (e *notFoundError) Error() string { return "config file not found: " + e.path }
func (e *notFoundError) Unwrap() error { return e.err }

// Parse decodes data strictly, fills in defaults and validates. On failure
// it returns every problem found, joined with errors.Join, each a
// *FieldError (see Problems); the *Config is then nil.
//
// "Every problem" holds across kinds: unknown keys, duplicate keys, values
// of the wrong type and invalid values are all reported in one pass. Only a
// YAML syntax error, an empty file or a second document stop early, since
// nothing after them can be located reliably. A value of the wrong type is
// reported once: the validation problems that its absence would cause on
// the same key (or inside it) are left out.
func Parse(data []byte) (*Config, error) {
	w, idx, problems := decode(data)
	if w == nil {
		return nil, joinProblems(problems)
	}
	c, more := validate(w, idx)
	for _, p := range more {
		if !idx.typeErrorCovers(p.Path) {
			problems = append(problems, p)
		}
	}
	if len(problems) > 0 {
		sort.SliceStable(problems, func(i, j int) bool { return problems[i].Line < problems[j].Line })
		return nil, joinProblems(problems)
	}
	return c, nil
}

// decode parses the YAML into a node tree, checks it against the wire types
// (nodeChecker: unknown and duplicate keys, kinds, integer and boolean
// spellings), replaces every value of the wrong type by a placeholder, and
// decodes the checked tree into the wire structs. It returns a nil wire
// config only when the file cannot be read as one YAML mapping at all.
func decode(data []byte) (*wireConfig, *posIndex, []*FieldError) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, nil, []*FieldError{{Msg: "config is empty"}}
		}
		return nil, nil, []*FieldError{syntaxProblem(err, data)}
	}
	var second yaml.Node
	switch err := dec.Decode(&second); {
	case errors.Is(err, io.EOF):
	case err != nil:
		return nil, nil, []*FieldError{syntaxProblem(err, data)}
	default:
		return nil, nil, []*FieldError{{Line: second.Line, Msg: "a second YAML document is not allowed (the config is one document; remove the '---' separator)"}}
	}
	if len(doc.Content) == 0 || doc.Content[0].Kind == yaml.ScalarNode && doc.Content[0].Tag == "!!null" {
		return nil, nil, []*FieldError{{Msg: "config is empty"}}
	}
	root := doc.Content[0]
	if root.Kind != yaml.MappingNode {
		return nil, nil, []*FieldError{{Line: root.Line, Msg: "the config must be a mapping of keys to values"}}
	}
	// A first decode of the untouched tree catches what is not a type
	// mismatch (excessive aliasing, an invalid !!binary, a value that does
	// not fit its explicit tag, a bad merge key) before nodeChecker walks
	// aliases; its type errors are found again, with paths, by nodeChecker.
	var scratch wireConfig
	if err := root.Decode(&scratch); err != nil {
		if _, ok := errors.AsType[*yaml.TypeError](err); !ok {
			return nil, nil, []*FieldError{syntaxProblem(err, data)}
		}
	}

	ck := &nodeChecker{}
	ck.check(root, reflect.TypeFor[wireConfig](), "")
	idx := newPosIndex(root)
	idx.typeErrors = ck.typeErrors

	var w wireConfig
	if err := root.Decode(&w); err != nil {
		// nodeChecker replaced every value yaml could not decode; reaching
		// this is a bug in nodeChecker. Fail closed with yaml's own words.
		ck.problems = append(ck.problems, &FieldError{Msg: "cannot decode the config: " + err.Error()})
	}
	sort.SliceStable(ck.problems, func(i, j int) bool { return ck.problems[i].Line < ck.problems[j].Line })
	return &w, idx, ck.problems
}

// nodeChecker walks the node tree along the wire types and collects the
// problems that strict YAML decoding would hit, with their key path and
// line, instead of reading them back from go-yaml's error text.
type nodeChecker struct {
	problems []*FieldError
	// typeErrors are the paths whose value had the wrong type (and was
	// replaced); validation problems on or below them are not reported.
	typeErrors []string
}

func (ck *nodeChecker) add(path string, line int, format string, args ...any) {
	ck.problems = append(ck.problems, &FieldError{Path: path, Line: line, Msg: fmt.Sprintf(format, args...)})
}

// check reports the problems of the value n decoded into type t at path.
// It returns a replacement node when n cannot be decoded into t as written
// (the caller puts it in n's place), or nil.
//
// A replacement makes the value read as absent (null) for pointer fields, or
// as a value every key's validation refuses at the same path (-1 for
// integers, an empty mapping for list items of struct type), so that
// validation neither trips over it nor substitutes a default that could
// collide with another key; Parse drops those follow-up problems.
func (ck *nodeChecker) check(n *yaml.Node, t reflect.Type, path string) *yaml.Node {
	ptr := t.Kind() == reflect.Pointer
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	line := n.Line
	v := n
	if v.Kind == yaml.AliasNode && v.Alias != nil {
		v = v.Alias // the walk is bounded by the (non-recursive) wire types
	}
	if v.Kind == yaml.ScalarNode && v.ShortTag() == "!!null" {
		return nil // absent; validation reports a required key
	}
	bad := func(format string, args ...any) *yaml.Node {
		ck.add(path, line, format, args...)
		ck.typeErrors = append(ck.typeErrors, path)
		return placeholder(n, t, ptr)
	}
	switch t.Kind() {
	case reflect.Bool:
		if v.Kind != yaml.ScalarNode || v.ShortTag() != "!!bool" {
			return bad("expected true or false, got %s", describe(v))
		}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		if v.Kind != yaml.ScalarNode || v.ShortTag() != "!!int" {
			return bad("expected an integer, got %s", describe(v))
		}
		// yaml.v3 reads "010" as octal (8): refuse a leading zero.
		if d := strings.TrimLeft(v.Value, "+-"); len(d) > 1 && d[0] == '0' && d[1] >= '0' && d[1] <= '9' {
			return bad("integer %q has a leading zero (YAML reads it as octal); write it without", clip(v.Value))
		}
		if err := v.Decode(reflect.New(t).Interface()); err != nil {
			return bad("integer %q is out of range", clip(v.Value))
		}
	case reflect.Float32, reflect.Float64:
		if v.Kind != yaml.ScalarNode || v.ShortTag() != "!!int" && v.ShortTag() != "!!float" {
			return bad("expected a number, got %s", describe(v))
		}
	case reflect.Map:
		if v.Kind != yaml.MappingNode {
			return bad("expected a mapping, got %s", describe(v))
		}
		for i := 0; i+1 < len(v.Content); i += 2 {
			k := v.Content[i]
			if k.Kind != yaml.ScalarNode || t.Key().Kind() != reflect.String {
				// Only string-keyed maps are meant for a config file.
				return bad("expected a mapping of names to values")
			}
			if r := ck.check(v.Content[i+1], t.Elem(), path+"."+k.Value); r != nil {
				v.Content[i+1] = r
			}
		}
	case reflect.String:
		if v.Kind != yaml.ScalarNode {
			return bad("expected a string, got %s", describe(v))
		}
	case reflect.Slice:
		if v.Kind != yaml.SequenceNode {
			return bad("expected a list, got %s", describe(v))
		}
		for i, item := range v.Content {
			p := path + "[" + strconv.Itoa(i) + "]"
			if item.ShortTag() == "!!null" { // an alias reports its target's tag
				// yaml.v3 silently drops a null list item, which would
				// shift the index (and line) of every later item.
				ck.add(p, item.Line, "empty list item (a '-' with nothing after it); remove it or fill it in")
				ck.typeErrors = append(ck.typeErrors, p)
				v.Content[i] = placeholder(item, t.Elem(), false)
				continue
			}
			if r := ck.check(item, t.Elem(), p); r != nil {
				v.Content[i] = r
			}
		}
	case reflect.Struct:
		if v.Kind != yaml.MappingNode {
			return bad("expected a mapping, got %s", describe(v))
		}
		ck.mapping(v, t, path, map[string]int{})
	}
	return nil
}

// mapping checks the keys and values of the mapping n against the struct
// type t. seen maps the keys already written at this level to their line;
// the keys of a merged mapping ("<<: *anchor") may be overridden and are
// not tracked.
func (ck *nodeChecker) mapping(n *yaml.Node, t reflect.Type, path string, seen map[string]int) {
	var keep []*yaml.Node
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Kind == yaml.ScalarNode && k.ShortTag() == "!!merge" {
			ck.merge(v, t, path)
			keep = append(keep, k, v)
			continue
		}
		p := k.Value
		if path != "" {
			p = path + "." + k.Value
		}
		if k.Kind != yaml.ScalarNode {
			ck.add(path, k.Line, "a key must be a plain name, got %s", describe(k))
			continue
		}
		if first, dup := seen[k.Value]; dup {
			ck.add(p, k.Line, "duplicate key (first defined at line %d)", first)
			continue // dropped: yaml.v3 refuses to decode a mapping with a duplicate
		}
		seen[k.Value] = k.Line
		f, ok := field(t, k.Value)
		if !ok {
			ck.add(p, k.Line, "unknown key%s", suggest(k.Value, t, path))
			keep = append(keep, k, v)
			continue
		}
		if r := ck.check(v, f.Type, p); r != nil {
			v = r
		}
		keep = append(keep, k, v)
	}
	n.Content = keep
}

// merge checks the value of a "<<" key: a mapping, or a list of mappings,
// merged into the mapping of type t at path.
func (ck *nodeChecker) merge(v *yaml.Node, t reflect.Type, path string) {
	if v.Kind == yaml.AliasNode && v.Alias != nil {
		v = v.Alias
	}
	switch v.Kind {
	case yaml.MappingNode:
		ck.mapping(v, t, path, map[string]int{})
	case yaml.SequenceNode:
		for _, m := range v.Content {
			ck.merge(m, t, path)
		}
	}
}

// field returns the field of the struct type t whose yaml name is name.
func field(t reflect.Type, name string) (reflect.StructField, bool) {
	for f := range t.Fields() {
		if yamlName(f) == name {
			return f, true
		}
	}
	return reflect.StructField{}, false
}

func yamlName(f reflect.StructField) string {
	name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
	return name
}

// placeholder is what check puts in place of a value of the wrong type n
// (see check). t is the element type, ptr whether the field is a pointer.
func placeholder(n *yaml.Node, t reflect.Type, ptr bool) *yaml.Node {
	r := &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!null", Value: "null", Line: n.Line, Column: n.Column}
	switch k := t.Kind(); {
	case k >= reflect.Int && k <= reflect.Int64:
		r.Tag, r.Value = "!!int", "-1"
	case ptr:
	case k == reflect.Struct || k == reflect.Map:
		r.Kind, r.Tag, r.Value = yaml.MappingNode, "!!map", ""
	case k == reflect.Slice:
		r.Kind, r.Tag, r.Value = yaml.SequenceNode, "!!seq", ""
	case k >= reflect.Uint && k <= reflect.Float64:
		r.Tag, r.Value = "!!int", "0"
	case k == reflect.Bool:
		r.Tag, r.Value = "!!bool", "false"
	case k == reflect.String:
		r.Tag, r.Value = "!!str", ""
	}
	return r
}

// describe names the YAML type of n for "expected X, got Y", with the value
// for scalars.
func describe(n *yaml.Node) string {
	if n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	}
	return tagWord(n.ShortTag()) + " " + strconv.Quote(clip(n.Value))
}

// syntaxProblem converts a YAML parser error ("yaml: line 3: ..."). go-yaml
// has no typed syntax error, so the line is read from the text. A tab in
// the indentation, which YAML forbids and go-yaml reports in several ways
// ("found character that cannot start any token", "found a tab character
// that violates indentation", sometimes one line early), gets its own
// message naming the line with the tab.
func syntaxProblem(err error, data []byte) *FieldError {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	line, rest := cutLine(msg)
	if l := problemLine(data, line, err.Error()); l > 0 {
		if l > line+1 { // go-yaml named the start of the enclosing block
			rest += "; check the indentation of this line"
		}
		line = l
	}
	if tab := tabIndentedLine(data, line); tab > 0 {
		return &FieldError{Line: tab, Msg: "invalid YAML: a tab is used for indentation; YAML indentation must use spaces"}
	}
	return &FieldError{Line: line, Msg: "invalid YAML: " + rest}
}

// problemLine returns the line where data stops being valid YAML: the first
// k >= from such that the first k lines alone fail with the same error as
// the whole file, or 0. go-yaml reports the line where the enclosing block
// starts ("did not find expected '-' indicator" names the first item of a
// list, not the mis-indented key five lines below); the error itself is not
// reinterpreted, only compared. Once the bad line is in a prefix, every
// longer prefix fails the same way (the parser stops there), so the line is
// found by binary search: O(log lines) parses.
func problemLine(data []byte, from int, whole string) int {
	ends := []int{} // ends[k-1] is the end offset of line k
	for i, c := range data {
		if c == '\n' {
			ends = append(ends, i+1)
		}
	}
	if len(data) > 0 && data[len(data)-1] != '\n' {
		ends = append(ends, len(data))
	}
	fails := func(k int) bool {
		var n yaml.Node
		err := yaml.Unmarshal(data[:ends[k-1]], &n)
		return err != nil && err.Error() == whole
	}
	if from < 1 || from > len(ends) || !fails(len(ends)) {
		return 0
	}
	lo, hi := from, len(ends) // fails(hi) holds
	for lo < hi {
		mid := lo + (hi-lo)/2
		if fails(mid) {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	return lo
}

// tabIndentedLine returns errLine, or else the line after it, when that line
// starts with whitespace containing a tab; 0 otherwise. Other lines are not
// considered: a tab inside a block scalar is content, not an error.
func tabIndentedLine(data []byte, errLine int) int {
	if errLine <= 0 {
		return 0
	}
	lines := strings.SplitN(string(data), "\n", errLine+2)
	for _, n := range []int{errLine, errLine + 1} {
		if n > len(lines) {
			break
		}
		l := lines[n-1]
		if strings.Contains(l[:len(l)-len(strings.TrimLeft(l, " \t"))], "\t") {
			return n
		}
	}
	return 0
}

// cutLine splits "line 12: rest" into 12 and "rest"; 0 and s otherwise.
func cutLine(s string) (int, string) {
	after, ok := strings.CutPrefix(s, "line ")
	if !ok {
		return 0, s
	}
	num, rest, ok := strings.Cut(after, ": ")
	if !ok {
		return 0, s
	}
	n, err := strconv.Atoi(num)
	if err != nil {
		return 0, s
	}
	return n, rest
}

// posIndex maps key paths to lines, from the node tree.
type posIndex struct {
	lines  map[string]int        // path -> line of its key (or of the list item)
	values map[string]*yaml.Node // path -> value node
	// typeErrors are the paths of values of the wrong type (see decode).
	typeErrors []string
}

func newPosIndex(root *yaml.Node) *posIndex {
	idx := &posIndex{lines: map[string]int{}, values: map[string]*yaml.Node{}}
	idx.walk(root, "")
	return idx
}

func (idx *posIndex) walk(n *yaml.Node, path string) {
	switch n.Kind {
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			p := k.Value
			if path != "" {
				p = path + "." + k.Value
			}
			if _, dup := idx.lines[p]; !dup {
				idx.lines[p] = k.Line
				idx.values[p] = v
			}
			idx.walk(v, p)
		}
	case yaml.SequenceNode:
		for i, v := range n.Content {
			p := path + "[" + strconv.Itoa(i) + "]"
			idx.lines[p] = v.Line
			idx.values[p] = v
			idx.walk(v, p)
		}
	}
}

// line returns the line of path, or of its nearest present ancestor.
func (idx *posIndex) line(path string) int {
	for path != "" {
		if l, ok := idx.lines[path]; ok {
			return l
		}
		i := strings.LastIndexAny(path, ".[")
		if i < 0 {
			return 0
		}
		path = path[:i]
	}
	return 0
}

// typeErrorCovers reports whether path is, or lies inside, a value that
// had the wrong type (a validation problem there is a consequence of it).
func (idx *posIndex) typeErrorCovers(path string) bool {
	for _, p := range idx.typeErrors {
		if path == p || strings.HasPrefix(path, p) && (path[len(p)] == '.' || path[len(p)] == '[') {
			return true
		}
	}
	return false
}

func tagWord(tag string) string {
	switch tag {
	case "!!str":
		return "a string"
	case "!!int":
		return "an integer"
	case "!!float":
		return "a number"
	case "!!bool":
		return "a boolean"
	case "!!null":
		return "null"
	case "!!seq":
		return "a list"
	case "!!map":
		return "a mapping"
	case "!!timestamp":
		return "a timestamp"
	case "!!binary":
		return "binary data"
	}
	return tag
}

// suggest returns a hint for the unknown key name in a mapping of the wire
// type t at path: " (did you mean \"x\"?)" for a likely typo of one of t's
// keys, the full path when name is a key that belongs at another level
// (rules: at the top level), or "".
func suggest(name string, t reflect.Type, path string) string {
	if name == "mitm" && t == reflect.TypeFor[wireConfig]() {
		return ` (the legacy "mitm" block is now "https_interception")`
	}
	best, bestD := "", 3
	for f := range t.Fields() {
		k := yamlName(f)
		d := editDistance(name, k)
		if len(name) >= 4 && (strings.HasPrefix(k, name) || strings.HasPrefix(name, k)) {
			d = min(d, 1)
		}
		if d < bestD {
			best, bestD = k, d
		}
	}
	if best != "" {
		return fmt.Sprintf(" (did you mean %q?)", best)
	}
	if where := keyPaths()[name]; where != "" && where != path {
		return fmt.Sprintf(" (%q belongs under %s)", name, where)
	}
	return ""
}

// keyPaths maps every key of the file to the path of the mapping it belongs
// in ("rules" -> "egress_policy"); a key used at several levels maps to "".
func keyPaths() map[string]string {
	out := map[string]string{}
	var walk func(t reflect.Type, path string)
	walk = func(t reflect.Type, path string) {
		for f := range t.Fields() {
			k := yamlName(f)
			if old, ok := out[k]; ok && old != path {
				out[k] = ""
			} else {
				out[k] = path
			}
			ft := f.Type
			for ft.Kind() == reflect.Pointer || ft.Kind() == reflect.Slice {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct {
				p := k
				if path != "" {
					p = path + "." + k
				}
				if f.Type.Kind() == reflect.Slice {
					p += "[]"
				}
				walk(ft, p)
			}
		}
	}
	walk(reflect.TypeFor[wireConfig](), "")
	return out
}

// editDistance is the Levenshtein distance of two short keys.
func editDistance(a, b string) int {
	if len(a) > 64 || len(b) > 64 {
		return 64
	}
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// clip shortens text repeated in messages (one length and one ellipsis for
// all of BotBox, see package echo).
func clip(s string) string { return echo.Clip(s) }
