// Package gitleaksbench compares toolgate's redactor with gitleaks' own detector on the same
// inputs: speed (BenchmarkRedact) and coverage (every secret gitleaks finds in the labelled
// corpus must be gone from toolgate's output; clean tool output must stay clean).
//
// It is a module of its own so that gitleaks and everything it pulls in (viper, cobra, archive
// readers, an RE2 engine compiled to WebAssembly) never enter the go.mod of the main module;
// the package has no non-test code.
//
// Run it with Go's regexp package inside gitleaks, and again the way gitleaks' release binaries
// are built, with RE2:
//
//	go test -run . -bench . ./...
//	go test -tags gore2regex -run . -bench . ./...
package gitleaksbench
