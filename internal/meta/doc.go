// Package meta holds repository-wide tests that catch rot: every package has
// one doc comment, the internal import rules of the style guide hold, and
// the botbox binary links no test-only or heavyweight packages. It has no
// code of its own.
package meta
