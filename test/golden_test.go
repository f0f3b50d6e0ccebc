package test

import (
	"bufio"
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// goldenDir holds the protocol's golden transcripts: NDJSON files of request
// line, response line pairs (CONTRACT.md section 8).
var goldenDir = filepath.Join("..", "..", "shared", "seed-fixtures", "goldens")

// TestGoldens sends each golden request line as one text message and compares
// the response bytes exactly. admission-errors.ndjson is left out: its
// requests need a backend that implements apply (idempotency keys, dry-run
// validation), which the memory backend does not.
func TestGoldens(t *testing.T) {
	runGoldens(t, startGateway(t)) // stateless requests: one gateway, one connection per file
}

// runGoldens runs the golden transcripts on gw, one connection per file.
func runGoldens(t *testing.T, gw *gateway) {
	tests := []struct {
		name string
		file string
	}{
		{name: "initialize", file: "initialize.ndjson"},
		{name: "get-empty", file: "get-empty.ndjson"},
		{name: "incompatible-version", file: "incompatible-version.ndjson"},
		{name: "invalid-params", file: "invalid-params.ndjson"},
		{name: "unknown-method", file: "unknown-method.ndjson"},
		{name: "malformed-request", file: "malformed-request.ndjson"},
		{name: "rejected-batch", file: "rejected-batch.ndjson"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			data, err := os.ReadFile(filepath.Join(goldenDir, tt.file))
			if err != nil {
				t.Fatal(err)
			}
			var lines [][]byte
			sc := bufio.NewScanner(bytes.NewReader(data))
			sc.Buffer(nil, 1<<20)
			for sc.Scan() {
				if len(bytes.TrimSpace(sc.Bytes())) > 0 {
					lines = append(lines, bytes.Clone(sc.Bytes()))
				}
			}
			if len(lines) == 0 || len(lines)%2 != 0 {
				t.Fatalf("%s: %d lines, want request/response pairs", tt.file, len(lines))
			}
			c := dial(t, gw)
			for i := 0; i < len(lines); i += 2 {
				c.sendText(string(lines[i]))
				c.expectText(string(lines[i+1]))
			}
		})
	}
}
