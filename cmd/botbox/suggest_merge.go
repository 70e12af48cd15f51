package main

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"strconv"

	"go.yaml.in/yaml/v3"

	"github.com/botbox/botbox/internal/config"
	"github.com/botbox/botbox/internal/policy"
)

// mergeProposal merges proposal p into the configuration base (YAML) and
// returns the merged configuration and notes for the operator. The
// proposal decides, for each host it names, the allow rule's
// allowed_ports and (unless --no-routes) its routes; the configuration
// keeps everything else:
//
//   - every top-level setting, default_action, and every rule for a host
//     the log did not show;
//   - in a merged rule, every other key (header_rewrites, query_rewrites,
//     remove_headers, limits, scrub_responses, ...) and its deny routes,
//     kept before the proposed allow routes, so an operator's refusal
//     still decides first;
//   - a deny rule, never turned into an allow (noted);
//   - a host an allow wildcard or CIDR rule decides gets an exact rule
//     copied from that rule (rewrites and limits included) with the
//     proposed ports and routes, so it decides as before, narrowed.
//
// The merged configuration must load (config.Parse) or the merge fails.
// TestSuggestMergeGolden holds it.
func mergeProposal(base []byte, p *proposal) (string, []string, error) {
	cfg, err := config.Parse(base)
	if err != nil {
		return "", nil, fmt.Errorf("the configuration does not load: %w", err)
	}
	pol, err := policy.Compile(cfg.Policy)
	if err != nil {
		return "", nil, fmt.Errorf("the configuration's policy does not compile: %w", err)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(base, &doc); err != nil {
		return "", nil, err
	}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) == 0 || doc.Content[0].Kind != yaml.MappingNode {
		return "", nil, errors.New("the configuration is not a YAML mapping")
	}
	ep := mappingValue(doc.Content[0], "egress_policy", yaml.MappingNode)
	rules := mappingValue(ep, "rules", yaml.SequenceNode)
	rules.Style = 0 // "rules: []" becomes a block list
	if len(rules.Content) != len(cfg.Policy.Rules) {
		return "", nil, fmt.Errorf("egress_policy.rules: %d YAML entries for %d rules", len(rules.Content), len(cfg.Policy.Rules))
	}
	var notes []string
	for _, pr := range p.rules {
		r := pol.RuleForName(pr.host)
		switch {
		case r == nil:
			node := &yaml.Node{Kind: yaml.MappingNode}
			setKey(node, "host", str(pr.host))
			setKey(node, "action", plain("allow"))
			applyProposal(node, pr, p.routes)
			rules.Content = append(rules.Content, node)
		case r.Action != config.ActionAllow:
			notes = append(notes, fmt.Sprintf("%s: kept as denied by rules[%d] (%s), although the log shows requests to it; review", pr.host, r.Index, r.Host))
		case r.Host == pr.host:
			applyProposal(rules.Content[r.Index], pr, p.routes)
		default:
			node := deepCopy(rules.Content[r.Index])
			setKey(node, "host", str(pr.host))
			applyProposal(node, pr, p.routes)
			rules.Content = append(rules.Content, node)
			notes = append(notes, fmt.Sprintf("%s: new exact rule copied from rules[%d] (%s), which decided it", pr.host, r.Index, r.Host))
		}
	}
	var buf bytes.Buffer
	fmt.Fprintf(&buf, "# Merged by botbox suggest from %d log lines (%d allow/report_deny decisions):\n", p.obs.lines, p.obs.used)
	buf.WriteString("# the allowed_ports and routes of the hosts observed; everything else as configured.\n")
	for _, w := range p.warnings() {
		fmt.Fprintf(&buf, "# REVIEW: %s\n", w)
	}
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(&doc); err != nil {
		return "", nil, err
	}
	if err := enc.Close(); err != nil {
		return "", nil, err
	}
	if _, err := config.Parse(buf.Bytes()); err != nil {
		return "", nil, fmt.Errorf("the merged configuration does not load (please report this): %w", err)
	}
	return buf.String(), notes, nil
}

// applyProposal sets the rule node's allowed_ports (removed for [443],
// the default) and, when routes, its routes: the existing deny routes
// first, then the proposed allow routes.
func applyProposal(rule *yaml.Node, pr proposedRule, routes bool) {
	if slices.Equal(pr.ports, []int{443}) {
		deleteKey(rule, "allowed_ports")
	} else {
		ports := flowSeq()
		for _, port := range pr.ports {
			ports.Content = append(ports.Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!int", Value: strconv.Itoa(port)})
		}
		setKey(rule, "allowed_ports", ports)
	}
	if !routes {
		return
	}
	seq := &yaml.Node{Kind: yaml.SequenceNode}
	if old := lookup(rule, "routes"); old != nil {
		for _, rt := range old.Content {
			if a := lookup(rt, "action"); a != nil && a.Value == "deny" {
				seq.Content = append(seq.Content, rt)
			}
		}
	}
	for _, rt := range pr.routes {
		node := &yaml.Node{Kind: yaml.MappingNode}
		methods, paths := flowSeq(), flowSeq()
		for _, m := range rt.methods {
			methods.Content = append(methods.Content, plain(m))
		}
		for _, path := range rt.paths {
			paths.Content = append(paths.Content, str(path))
		}
		setKey(node, "methods", methods)
		setKey(node, "paths", paths)
		seq.Content = append(seq.Content, node)
	}
	setKey(rule, "routes", seq)
}

func plain(s string) *yaml.Node { return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: s} }

func str(s string) *yaml.Node {
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: s, Style: yaml.DoubleQuotedStyle}
}

func flowSeq() *yaml.Node { return &yaml.Node{Kind: yaml.SequenceNode, Style: yaml.FlowStyle} }

// lookup returns the value of key in mapping m, nil when absent.
func lookup(m *yaml.Node, key string) *yaml.Node {
	if m == nil || m.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			return m.Content[i+1]
		}
	}
	return nil
}

// mappingValue returns the value of key in m, adding an empty node of
// kind when the key is absent or null.
func mappingValue(m *yaml.Node, key string, kind yaml.Kind) *yaml.Node {
	if v := lookup(m, key); v != nil && v.Kind == kind {
		return v
	}
	v := &yaml.Node{Kind: kind}
	setKey(m, key, v)
	return v
}

// setKey sets key in mapping m to v, in place when present, else last.
func setKey(m *yaml.Node, key string, v *yaml.Node) {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			m.Content[i+1] = v
			return
		}
	}
	m.Content = append(m.Content, plain(key), v)
}

func deleteKey(m *yaml.Node, key string) {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			m.Content = slices.Delete(m.Content, i, i+2)
			return
		}
	}
}

func deepCopy(n *yaml.Node) *yaml.Node {
	c := *n
	c.Content = make([]*yaml.Node, len(n.Content))
	for i, k := range n.Content {
		c.Content[i] = deepCopy(k)
	}
	return &c
}
