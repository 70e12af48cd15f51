package main

// Statistics over repeats: median and range, paired ratios.

import (
	"fmt"
	"slices"
	"strconv"
)

type stat struct{ min, med, max float64 }

func stats(v []float64) stat {
	if len(v) == 0 {
		return stat{}
	}
	s := slices.Clone(v)
	slices.Sort(s)
	med := s[len(s)/2]
	if len(s)%2 == 0 {
		med = (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return stat{s[0], med, s[len(s)-1]}
}

func (s stat) String() string {
	if s.min == s.max {
		return trim(s.med)
	}
	return fmt.Sprintf("%s [%s–%s]", trim(s.med), trim(s.min), trim(s.max))
}

// trim formats a table value with three significant digits or more: no
// decimals from 100 up, one from 10, two below.
func trim(v float64) string {
	switch {
	case v >= 100:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case v >= 10:
		return strconv.FormatFloat(v, 'f', 1, 64)
	}
	return strconv.FormatFloat(v, 'f', 2, 64)
}

// group selects the valid cells of a scenario/target/conns.
func (r *runner) group(scn, target string, conns int) []cell {
	var g []cell
	for _, c := range r.cells {
		if c.scenario == scn && c.target == target && c.conns == conns && c.bad == "" {
			g = append(g, c)
		}
	}
	return g
}

func field(g []cell, f func(cell) float64) stat {
	v := make([]float64, len(g))
	for i, c := range g {
		v[i] = f(c)
	}
	return stats(v)
}

// ratio is the median over repeats of the paired ratio target/ref (same
// repeat, adjacent in time), with min and max.
func (r *runner) ratio(scn, target, ref string, conns int, f func(cell) float64) string {
	a, b := r.group(scn, target, conns), r.group(scn, ref, conns)
	var v []float64
	for _, x := range a {
		for _, y := range b {
			if x.rep == y.rep && f(y) > 0 {
				v = append(v, f(x)/f(y))
			}
		}
	}
	if len(v) == 0 {
		return "-"
	}
	s := stats(v)
	if s.min == s.max {
		return fmt.Sprintf("%.2f×", s.med)
	}
	return fmt.Sprintf("%.2f× [%.2f–%.2f]", s.med, s.min, s.max)
}
