package client_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestReadmeGoBlocks compiles every ```go block of the README as a program
// of this module, so that what a user pastes builds.
func TestReadmeGoBlocks(t *testing.T) {
	watchdog(t)
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks := goBlocks(string(readme))
	if len(blocks) == 0 {
		t.Fatal("no ```go block in README.md")
	}
	goBin := filepath.Join(os.Getenv("GOROOT"), "bin", "go")
	if _, err := os.Stat(goBin); err != nil {
		goBin = "go"
	}
	for i, b := range blocks {
		dir := t.TempDir()
		src := filepath.Join(dir, "main.go")
		if err := os.WriteFile(src, []byte(b), 0o600); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(goBin, "build", "-o", filepath.Join(dir, "prog"), src)
		cmd.Dir = ".." // the module root: the block imports the module's packages
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("README's Go block %d does not build: %v\n%s\n%s", i+1, err, out, b)
		}
	}
}

// goBlocks returns the bodies of the ```go fences of a Markdown text.
func goBlocks(md string) []string {
	var out []string
	for {
		i := strings.Index(md, "\n```go\n")
		if i < 0 {
			return out
		}
		md = md[i+len("\n```go\n"):]
		j := strings.Index(md, "\n```")
		if j < 0 {
			return out
		}
		out = append(out, md[:j+1])
		md = md[j:]
	}
}
