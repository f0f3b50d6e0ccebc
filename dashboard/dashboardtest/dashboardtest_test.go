package dashboardtest

import (
	"fmt"
	"os/exec"
	"runtime"
	"strings"
	"testing"
)

// skipTB records a skip of a test run on its own goroutine.
type skipTB struct {
	testing.TB // nil: any other method panics
	msg        string
}

func (s *skipTB) Helper() {}

func (s *skipTB) Skipf(format string, args ...any) {
	s.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// TestBrowserMissingSkipsWithTheInstallCommand: on a machine with no
// Chromium, the browser tests skip and say how to install one.
func TestBrowserMissingSkipsWithTheInstallCommand(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	tb := &skipTB{}
	done := make(chan string)
	go func() {
		defer close(done)
		done <- Browser(tb)
	}()
	if path := <-done; path != "" {
		t.Fatalf("Browser found %q on an empty PATH", path)
	}
	if !strings.Contains(tb.msg, InstallCommand) {
		t.Fatalf("skip message %q does not name %q", tb.msg, InstallCommand)
	}
}

// TestEdgeDoesNotLinkTheBrowserDriver: only tests import this package, so
// chromedp stays out of the edge binary.
func TestEdgeDoesNotLinkTheBrowserDriver(t *testing.T) {
	gotool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command on PATH")
	}
	out, err := exec.Command(gotool, "list", "-deps", "github.com/openengine/edge/cmd/edge").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, pkg := range strings.Fields(string(out)) {
		if strings.HasPrefix(pkg, "github.com/chromedp/") || strings.HasSuffix(pkg, "/dashboardtest") {
			t.Errorf("cmd/edge links %s", pkg)
		}
	}
}
