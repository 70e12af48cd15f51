package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"reflect"
	"sort"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Load reads the file at path and parses it with Parse. A read error is
// wrapped as "reading config %q: ..."; the problems of Parse are returned
// as Parse returns them (joined, one per line), so that callers can list
// them (see Problems) under their own heading naming the file.
func Load(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading config %q: %w", path, err)
	}
	return Parse(data)
}

// Parse decodes data strictly, fills in defaults and validates. On failure
// it returns every problem found, joined with errors.Join, each a
// *FieldError (see Problems); the *Config is then nil.
func Parse(data []byte) (*Config, error) {
	w, idx, problems := decode(data)
	if w == nil {
		return nil, joinProblems(problems)
	}
	c, more := validate(w, idx)
	problems = append(problems, more...)
	if len(problems) > 0 {
		sort.SliceStable(problems, func(i, j int) bool { return problems[i].Line < problems[j].Line })
		return nil, joinProblems(problems)
	}
	return c, nil
}

// decode parses the YAML twice: once into a node tree (for line numbers,
// the empty-file and single-document checks) and once strictly into the
// wire structs (yaml.Node.Decode would lose KnownFields). It returns a nil
// wire config when the problems found make validation pointless; unknown
// keys alone do not.
func decode(data []byte) (*wireConfig, *posIndex, []*FieldError) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, nil, []*FieldError{{Msg: "config is empty"}}
		}
		return nil, nil, []*FieldError{syntaxProblem(err)}
	}
	var second yaml.Node
	switch err := dec.Decode(&second); {
	case errors.Is(err, io.EOF):
	case err != nil:
		return nil, nil, []*FieldError{syntaxProblem(err)}
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
	idx := newPosIndex(root)

	strict := yaml.NewDecoder(bytes.NewReader(data))
	strict.KnownFields(true)
	var w wireConfig
	var problems []*FieldError
	fatal := false
	if err := strict.Decode(&w); err != nil {
		var te *yaml.TypeError
		if !errors.As(err, &te) {
			return nil, nil, []*FieldError{syntaxProblem(err)}
		}
		for _, msg := range te.Errors {
			p, unknownKey := idx.typeProblem(msg)
			problems = append(problems, p)
			fatal = fatal || !unknownKey
		}
	}
	if !fatal {
		// yaml.v3 truncates floats into integer fields, reads "010" as
		// octal and "yes"/"on" as true; refuse all three.
		ints := checkScalars(root, reflect.TypeFor[wireConfig](), "", nil)
		problems = append(problems, ints...)
		fatal = len(ints) > 0
	}
	if fatal {
		sort.SliceStable(problems, func(i, j int) bool { return problems[i].Line < problems[j].Line })
		return nil, nil, problems
	}
	return &w, idx, problems
}

// checkScalars walks the node tree along the wire type t and reports every
// value decoded into an integer field that is not a plain YAML integer
// (e.g. 1.5 or 1e3, which yaml.v3 truncates) or that has a leading zero
// (which yaml.v3 reads as octal: 0443 is 291), and every value decoded into
// a boolean field that is not true or false (yaml.v3 accepts "yes", "on").
func checkScalars(n *yaml.Node, t reflect.Type, path string, out []*FieldError) []*FieldError {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	line := n.Line
	if n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias // the walk is bounded by the (non-recursive) wire types
	}
	switch {
	case t.Kind() == reflect.Bool:
		if n.Kind == yaml.ScalarNode && n.ShortTag() != "!!bool" && n.ShortTag() != "!!null" {
			out = append(out, &FieldError{Path: path, Line: line, Msg: fmt.Sprintf("expected true or false, got %s %q", tagWord(n.ShortTag()), clip(n.Value))})
		}
	case t.Kind() == reflect.Int64:
		if n.Kind != yaml.ScalarNode {
			return out // a type error already reported by yaml
		}
		v := strings.TrimLeft(n.Value, "+-")
		switch {
		case n.ShortTag() == "!!null":
		case n.ShortTag() != "!!int":
			out = append(out, &FieldError{Path: path, Line: line, Msg: fmt.Sprintf("expected an integer, got %s %q", tagWord(n.ShortTag()), clip(n.Value))})
		case len(v) > 1 && v[0] == '0' && v[1] >= '0' && v[1] <= '9':
			out = append(out, &FieldError{Path: path, Line: line, Msg: fmt.Sprintf("integer %q has a leading zero (YAML reads it as octal); write it without", clip(n.Value))})
		}
	case t.Kind() == reflect.Slice && n.Kind == yaml.SequenceNode:
		for i, item := range n.Content {
			out = checkScalars(item, t.Elem(), path+"["+strconv.Itoa(i)+"]", out)
		}
	case t.Kind() == reflect.Struct && n.Kind == yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			for f := range t.Fields() {
				if name, _, _ := strings.Cut(f.Tag.Get("yaml"), ","); name == k.Value {
					p := k.Value
					if path != "" {
						p = path + "." + k.Value
					}
					out = checkScalars(v, f.Type, p, out)
				}
			}
		}
	}
	return out
}

// syntaxProblem converts a YAML parser error ("yaml: line 3: ...").
func syntaxProblem(err error) *FieldError {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	line, rest := cutLine(msg)
	return &FieldError{Line: line, Msg: "invalid YAML: " + rest}
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
	keys   []posEntry            // every key and list item, in document order
}

type posEntry struct {
	path, name string // name is the last key ("" for list items)
	line       int    // line of the key
	valueLine  int    // line of the value node
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
			idx.keys = append(idx.keys, posEntry{path: p, name: k.Value, line: k.Line, valueLine: v.Line})
			idx.walk(v, p)
		}
	case yaml.SequenceNode:
		for i, v := range n.Content {
			p := path + "[" + strconv.Itoa(i) + "]"
			idx.lines[p] = v.Line
			idx.values[p] = v
			idx.keys = append(idx.keys, posEntry{path: p, line: v.Line, valueLine: v.Line})
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

// typeProblem converts one message of a *yaml.TypeError into a FieldError
// with a key path. unknownKey reports an unknown-key problem, after which
// the decoded values are still usable.
func (idx *posIndex) typeProblem(msg string) (p *FieldError, unknownKey bool) {
	line, rest := cutLine(msg)
	p = &FieldError{Line: line, Msg: rest}

	if name, typ, ok := parseUnknownField(rest); ok {
		p.Path = idx.keyPath(line, name)
		if p.Path == "" {
			p.Path = name
		}
		p.Msg = "unknown key" + suggest(name, typ)
		return p, true
	}
	if name, first, ok := parseDuplicateKey(rest); ok {
		p.Path = idx.keyPath(line, name)
		if p.Path == "" {
			p.Path = name
		}
		p.Msg = fmt.Sprintf("duplicate key (first defined at line %d)", first)
		return p, false
	}
	if tag, value, target, ok := parseCannotUnmarshal(rest); ok {
		path, node := idx.valueAt(line, tag, value)
		p.Path = path
		got := tagWord(tag)
		if node != nil && node.Kind == yaml.ScalarNode {
			got += " " + strconv.Quote(clip(node.Value))
		}
		p.Msg = fmt.Sprintf("expected %s, got %s", targetWord(target), got)
		return p, false
	}
	return p, false
}

// keyPath finds the path of the key called name on line.
func (idx *posIndex) keyPath(line int, name string) string {
	for _, k := range idx.keys {
		if k.line == line && k.name == name {
			return k.path
		}
	}
	return ""
}

// valueAt finds the value node on line that yaml reported with tag and its
// (possibly shortened) value.
func (idx *posIndex) valueAt(line int, tag, short string) (string, *yaml.Node) {
	var firstPath, matchPath string
	var firstNode, matchNode *yaml.Node
	for _, k := range idx.keys {
		if k.valueLine != line {
			continue
		}
		n := idx.values[k.path]
		if n == nil {
			continue
		}
		if firstNode == nil {
			firstPath, firstNode = k.path, n
		}
		if n.ShortTag() == tag && shortValue(n.Value) == short {
			// The last match is the deepest: a block mapping and its
			// first key's value can start on the same line.
			matchPath, matchNode = k.path, n
		}
	}
	if matchNode != nil {
		return matchPath, matchNode
	}
	return firstPath, firstNode
}

// shortValue mirrors how yaml/v3 shortens values in its messages.
func shortValue(v string) string {
	if len(v) > 10 {
		return v[:7] + "..."
	}
	return v
}

func parseUnknownField(s string) (name, typ string, ok bool) {
	rest, ok := strings.CutPrefix(s, "field ")
	if !ok {
		return "", "", false
	}
	i := strings.LastIndex(rest, " not found in type ")
	if i < 0 {
		return "", "", false
	}
	return rest[:i], rest[i+len(" not found in type "):], true
}

func parseDuplicateKey(s string) (name string, first int, ok bool) {
	rest, ok := strings.CutPrefix(s, "mapping key ")
	if !ok {
		return "", 0, false
	}
	i := strings.LastIndex(rest, " already defined at line ")
	if i < 0 {
		return "", 0, false
	}
	name, err := strconv.Unquote(rest[:i])
	if err != nil {
		name = rest[:i]
	}
	first, _ = strconv.Atoi(rest[i+len(" already defined at line "):])
	return name, first, true
}

// parseCannotUnmarshal parses "cannot unmarshal !!str `abc` into int".
func parseCannotUnmarshal(s string) (tag, value, target string, ok bool) {
	rest, ok := strings.CutPrefix(s, "cannot unmarshal ")
	if !ok {
		return "", "", "", false
	}
	i := strings.LastIndex(rest, " into ")
	if i < 0 {
		return "", "", "", false
	}
	target = rest[i+len(" into "):]
	rest = rest[:i]
	tag, value, _ = strings.Cut(rest, " ")
	value = strings.TrimSuffix(strings.TrimPrefix(value, "`"), "`")
	return tag, value, target, true
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

func targetWord(target string) string {
	target = strings.TrimLeft(target, "*")
	switch {
	case strings.HasPrefix(target, "int"), strings.HasPrefix(target, "uint"):
		return "an integer"
	case target == "bool":
		return "true or false"
	case target == "string":
		return "a string"
	case strings.HasPrefix(target, "[]"):
		return "a list"
	case strings.HasPrefix(target, "config.wire"):
		return "a mapping"
	}
	return target
}

// suggest returns " (did you mean \"x\"?)" for a likely typo of a key of
// the wire type typ (as named by yaml, e.g. "config.wireRule"), or "".
func suggest(name, typ string) string {
	if name == "mitm" && typ == "config.wireConfig" {
		return ` (the legacy "mitm" block is now "https_interception")`
	}
	var keys []string
	for _, t := range []reflect.Type{
		reflect.TypeFor[wireConfig](), reflect.TypeFor[wirePolicy](), reflect.TypeFor[wireRule](),
		reflect.TypeFor[wireRewrite](), reflect.TypeFor[wireInterception](),
	} {
		if t.String() != typ {
			continue
		}
		for f := range t.Fields() {
			k, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
			keys = append(keys, k)
		}
	}
	best, bestD := "", 3
	for _, k := range keys {
		d := editDistance(name, k)
		if len(name) >= 4 && (strings.HasPrefix(k, name) || strings.HasPrefix(name, k)) {
			d = min(d, 1)
		}
		if d < bestD {
			best, bestD = k, d
		}
	}
	if best == "" {
		return ""
	}
	return fmt.Sprintf(" (did you mean %q?)", best)
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

// clip shortens text repeated in messages.
func clip(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}
