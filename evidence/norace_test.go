//go:build !race

package evidence

// raceDetector is set when the tests run under -race, which makes the
// exhaustive tests ten times slower: they then sample instead.
const raceDetector = false
