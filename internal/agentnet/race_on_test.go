//go:build race

package agentnet

// raceEnabled: the race detector is on (heavy tests skip).
const raceEnabled = true
