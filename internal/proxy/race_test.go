//go:build race

package proxy

// raceEnabled reports a -race build, where sync.Pool randomly drops items
// and allocation counts are meaningless.
const raceEnabled = true
