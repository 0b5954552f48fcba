//go:build race

package enforcer

// raceEnabled says the race detector is on: it slows the code five to ten times, so tests
// that bound latencies widen their bounds (latencySlack).
const raceEnabled = true
