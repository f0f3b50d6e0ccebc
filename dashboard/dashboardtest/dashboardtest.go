// Package dashboardtest drives the dashboard in a headless Chromium, for tests:
// it finds the browser (or skips the test with the command that installs it),
// opens the page at any URL, waits for a render that shows what the test
// expects, reads what the page shows through its data-metric hooks, and saves
// screenshots.
//
// Only tests import this package, so chromedp never reaches the edge binary.
// The URL under test is a parameter: the dashboard package's own tests point it
// at an httptest server with a fake api/stats, and an end-to-end test can point
// it at a real admin listener.
package dashboardtest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	cdplog "github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
)

// InstallCommand installs the browser these tests drive, on Debian.
const InstallCommand = "apt-get install -y chromium"

// browsers are the names a Chromium goes by on PATH, in order of preference.
var browsers = []string{"chromium", "chromium-browser", "google-chrome"}

// Limits of one page's life: the whole browser session, and the wait for the
// first render after loading.
const (
	sessionLimit = 2 * time.Minute
	loadLimit    = 20 * time.Second
)

// Browser returns the path of a Chromium on PATH, or skips the test, naming
// the command that installs one.
func Browser(t testing.TB) string {
	t.Helper()
	for _, name := range browsers {
		if path, err := exec.LookPath(name); err == nil {
			return path
		}
	}
	t.Skipf("no browser on PATH (looked for %s); install one with: %s", strings.Join(browsers, ", "), InstallCommand)
	return ""
}

// Page is the dashboard open in a headless Chromium. Its methods must be
// called on the test's goroutine.
type Page struct {
	t   testing.TB
	ctx context.Context // the tab; ends with the test

	mu     sync.Mutex
	errors []string // guarded by mu: exceptions, console errors and error log entries, in order
}

// Open starts a headless Chromium, loads url in it and waits for the page's
// first render. The browser is closed when the test ends. Skips the test when
// no browser is installed.
func Open(t testing.TB, url string) *Page {
	t.Helper()
	path := Browser(t)
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(path),
		chromedp.WindowSize(1440, 960),
		chromedp.UserDataDir(t.TempDir()),
	}
	if os.Geteuid() == 0 {
		opts = append(opts, chromedp.NoSandbox) // Chromium refuses to start its sandbox as root
	}
	root, stop := context.WithTimeout(context.Background(), sessionLimit)
	ctx, cancel := chromedp.NewContext(root, chromedp.WithAllocatorOptions(opts...))
	t.Cleanup(func() {
		if err := chromedp.Cancel(ctx); err != nil {
			t.Logf("closing the browser: %v", err)
		}
		cancel()
		stop()
	})
	p := &Page{t: t, ctx: ctx}
	if err := chromedp.Do(ctx); err != nil { // starts the browser, bound to ctx
		t.Fatalf("starting %s: %v", path, err)
	}
	if err := chromedp.Listen(ctx, p.record); err != nil {
		t.Fatalf("listening to the page: %v", err)
	}
	if _, err := chromedp.Call(ctx, cdplog.Enable, cdp.Empty{}); err != nil {
		t.Fatalf("enabling the page's log: %v", err)
	}
	load, cancelLoad := context.WithTimeout(ctx, loadLimit)
	defer cancelLoad()
	if err := chromedp.Do(load, chromedp.Navigate(url)); err != nil {
		t.Fatalf("loading %s: %v", url, err)
	}
	p.WaitFor(loadLimit, "the first render", func(Snapshot) bool { return true })
	return p
}

// record keeps what the page reports as an error. It runs on chromedp's
// reader goroutine and must return fast.
func (p *Page) record(ev any) {
	var msg string
	switch ev := ev.(type) {
	case *runtime.EventExceptionThrown:
		msg = (&chromedp.ExceptionError{ExceptionDetails: ev.ExceptionDetails}).Error()
	case *runtime.EventConsoleAPICalled:
		if ev.Type != runtime.ConsoleAPICalledTypeError {
			return
		}
		parts := make([]string, 0, len(ev.Args))
		for _, a := range ev.Args {
			parts = append(parts, strings.Trim(string(a.Value), `"`)+a.Description)
		}
		msg = "console.error: " + strings.Join(parts, " ")
	case *cdplog.EventEntryAdded:
		if ev.Entry.Level != cdplog.EntryLevelError {
			return
		}
		msg = fmt.Sprintf("%s: %s %s", ev.Entry.Source, ev.Entry.Text, ev.Entry.URL)
	default:
		return
	}
	p.mu.Lock()
	p.errors = append(p.errors, msg)
	p.mu.Unlock()
}

// Errors returns what the page reported as an error so far: uncaught
// exceptions, console.error calls and error entries of the browser's log
// (a failed fetch, a blocked resource, a Content-Security-Policy violation).
func (p *Page) Errors() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.errors...)
}

// WaitFor waits for a render of the page after which ready holds, at most
// timeout, and returns what that render showed. It fails the test with the
// last render seen and the page's errors if none does. Renders come once a
// second, when the page polls api/stats.
func (p *Page) WaitFor(timeout time.Duration, what string, ready func(Snapshot) bool) Snapshot {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, timeout)
	defer cancel()
	var last Snapshot
	for {
		s, err := chromedp.Run(ctx, chromedp.Poll[Snapshot](
			fmt.Sprintf(snapshotJS, last.Updates),
			chromedp.WithPollingInterval(20*time.Millisecond),
			chromedp.WithPollingTimeout(0), // bounded by ctx
		))
		if err != nil {
			p.t.Fatalf("waited %s for %s: %v\nlast render: %s\npage errors: %q", timeout, what, err, last, p.Errors())
		}
		last = s
		if ready(s) {
			return s
		}
	}
}

// Eval evaluates a JavaScript expression in the page, awaiting it if it is a
// promise, and decodes its value into T. It fails the test on an exception.
func Eval[T any](p *Page, expr string) T {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, loadLimit)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr, chromedp.EvalAwaitPromise))
	if err != nil {
		p.t.Fatalf("evaluating %s: %v", expr, err)
	}
	return v
}

// Screenshot saves a PNG of the page's body at path: the whole page, without
// the empty viewport below a short one.
func (p *Page) Screenshot(path string) {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, loadLimit)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.Screenshot(chromedp.CSS("body")))
	if err != nil {
		p.t.Fatalf("screenshot: %v", err)
	}
	if err := os.WriteFile(path, png, 0o644); err != nil {
		p.t.Fatal(err)
	}
}

// Load opens the dashboard at baseURL, waits (at most timeout) until a render
// satisfies ready, saves a screenshot into the test's temporary directory,
// logs its path and returns it. The page must show no error by then.
func Load(t testing.TB, baseURL string, timeout time.Duration, ready func(Snapshot) bool) (screenshot string) {
	t.Helper()
	p := Open(t, baseURL)
	s := p.WaitFor(timeout, "the dashboard to show live data", ready)
	screenshot = filepath.Join(t.TempDir(), "dashboard.png")
	p.Screenshot(screenshot)
	t.Logf("dashboard screenshot: %s (%s)", screenshot, s)
	if errs := p.Errors(); len(errs) > 0 {
		t.Errorf("the page reported errors: %q", errs)
	}
	return screenshot
}

// Live reports whether a render shows the page connected, with a known
// connection count and a non-zero request rate: the dashboard of a server
// under load.
func Live(s Snapshot) bool {
	_, conns := s.Value("connections")
	rate, _ := s.Value("requests-rate")
	return s.State == "live" && conns && rate > 0
}
