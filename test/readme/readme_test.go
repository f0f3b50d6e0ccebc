// Package readme runs README.md's shell blocks as a reader pasting them
// would (TestReadmeShellBlocks).
package readme

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/openengine/edge/internal/poll"
)

const (
	// blockTimeout bounds one block, the time its calls wait for what
	// it started included.
	blockTimeout = 60 * time.Second
	// buildTimeout bounds the builds run before the blocks (a cold build
	// cache on a busy machine).
	buildTimeout = 5 * time.Minute
	// stopGrace is how long a block's background processes get to stop
	// after SIGTERM before the block's process group is killed.
	stopGrace = 15 * time.Second
)

// A block is a fenced block of README.md.
type block struct {
	line int    // of the opening fence, 1-based
	lang string // sh, bash, console, toml, ...
	body string // its lines, the fence's indentation removed
	// skip is the reason of a <!-- not run: REASON --> before the block;
	// file the name of a <!-- file: NAME --> before it.
	skip, file string
}

var (
	fenceRe  = regexp.MustCompile("^( *)```([a-z]*)\\s*$")
	notRunRe = regexp.MustCompile(`^\s*<!--\s*not run:\s*(.*?)\s*-->\s*$`)
	fileRe   = regexp.MustCompile(`^\s*<!--\s*file:\s*(\S+)\s*-->\s*$`)
)

// blocks returns the fenced blocks of md, in order, with the marker of the
// line just before each (the README's conventions, see TestReadmeShellBlocks).
func blocks(md string) ([]block, error) {
	lines := strings.Split(md, "\n")
	var out []block
	for i := 0; i < len(lines); i++ {
		m := fenceRe.FindStringSubmatch(lines[i])
		if m == nil {
			continue
		}
		b := block{line: i + 1, lang: m[2]}
		if i > 0 {
			if mm := notRunRe.FindStringSubmatch(lines[i-1]); mm != nil {
				b.skip = mm[1]
				if b.skip == "" {
					return nil, fmt.Errorf("README.md:%d: <!-- not run: --> without a reason", i)
				}
			}
			if mm := fileRe.FindStringSubmatch(lines[i-1]); mm != nil {
				b.file = mm[1]
			}
		}
		indent := m[1]
		var body []string
		for i++; ; i++ {
			if i == len(lines) {
				return nil, fmt.Errorf("README.md:%d: the block does not end", b.line)
			}
			if strings.TrimSpace(lines[i]) == "```" {
				break
			}
			body = append(body, strings.TrimPrefix(lines[i], indent))
		}
		b.body = strings.Join(body, "\n") + "\n"
		out = append(out, b)
	}
	return out, nil
}

// shell reports whether b is a shell block, and returns its commands: a
// console block's lines that start with "$ ", the rest as they are.
func (b block) shell() (string, bool) {
	switch b.lang {
	case "sh", "bash", "shell":
		return b.body, true
	case "console":
		var cmds []string
		for _, l := range strings.Split(b.body, "\n") {
			if c, ok := strings.CutPrefix(l, "$ "); ok {
				cmds = append(cmds, c)
			}
		}
		return strings.Join(cmds, "\n") + "\n", true
	}
	return "", false
}

// TestReadmeShellBlocks runs README.md's shell blocks (```sh, ```bash,
// ```console: its "$ " lines), in order, each as a reader pasting it into a
// shell would, and fails when one fails. The conventions of the README:
//
//   - `<!-- not run: REASON -->` on the line before a block: it needs what a
//     test cannot have (a service of your own, root, a terminal to press
//     Ctrl-C in); the test skips it and logs why.
//   - `<!-- file: NAME -->` before a block (of any language): its text is
//     written to NAME in the working directory, for the blocks after it.
//   - A block that starts processes in the background (`... &`) waits until
//     they serve before its first call (`edge call --wait`); they are
//     stopped at the end of the block.
//
// Each block runs in its own `bash -e`, in a working directory that holds
// the checkout (symbolic links to its files; bin/ its own), with HOME an
// empty directory and PATH starting with the edge built from this tree
// (`edge`; the blocks' `make build` gives them bin/edge). Each gets its own
// network namespace with only a loopback interface (unshare), and its own
// PID namespace, so that the README's fixed ports (8080, 9090, 4222, ...)
// are free whatever else runs on the machine, and nothing a block started
// outlives it: at the end of the block, a trap sends SIGTERM to everything
// it started and waits for it, and the namespace's end kills what remains.
// Without unshare the blocks run on the machine's loopback, each in its own
// process group, which is signalled the same way; a block whose ports are
// taken is then skipped. A block has blockTimeout. The builds the blocks
// run (`make build`, `go build`) are run once before the first block, so a
// cold build cache does not count against a block's time. Nothing is
// downloaded: GOPROXY=off.
func TestReadmeShellBlocks(t *testing.T) {
	if testing.Short() {
		t.Skip("runs README.md's shell blocks: minutes (not with -short)")
	}
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("no bash")
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	md, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	all, err := blocks(string(md))
	if err != nil {
		t.Fatal(err)
	}
	work, home, pathDir := t.TempDir(), t.TempDir(), t.TempDir()
	farm(t, root, work)
	env := blockEnv(t, home, pathDir)

	// The builds first: the edge on PATH is the one `make build` makes.
	builds := []string{"go build -buildvcs=auto -o bin/edge ./cmd/edge"}
	for _, b := range all {
		if sh, ok := b.shell(); ok && b.skip == "" {
			for _, l := range strings.Split(sh, "\n") {
				if l = strings.TrimSpace(l); strings.HasPrefix(l, "go build ") || l == "make build" {
					builds = append(builds, l)
				}
			}
		}
	}
	for _, c := range builds {
		if out, err := run(bash, work, env, c, buildTimeout); err != nil {
			t.Fatalf("%s: %v\n%s", c, err, out)
		}
	}
	if err := os.Symlink(filepath.Join(work, "bin", "edge"), filepath.Join(pathDir, "edge")); err != nil {
		t.Fatal(err)
	}

	isolated := canIsolate(bash)
	if !isolated {
		t.Log("unshare -rn --pid cannot run here: the blocks run on this machine's loopback, each in its own process group")
	}
	ran := 0
	for _, b := range all {
		if b.file != "" {
			if err := os.WriteFile(filepath.Join(work, b.file), []byte(b.body), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		sh, ok := b.shell()
		if !ok {
			continue
		}
		name := fmt.Sprintf("line%d", b.line)
		t.Run(name, func(t *testing.T) {
			if b.skip != "" {
				t.Skipf("README.md:%d: not run: %s", b.line, b.skip)
			}
			if !isolated {
				if busy := busyPorts(sh); len(busy) > 0 {
					t.Skipf("README.md:%d: ports %v taken on this machine (and unshare unavailable)", b.line, busy)
				}
			}
			start := time.Now()
			out, err := runBlock(t, bash, work, env, sh, isolated)
			if err != nil {
				t.Fatalf("README.md:%d: the block failed after %v: %v\n--- block:\n%s--- output:\n%s",
					b.line, time.Since(start).Round(time.Millisecond), err, sh, out)
			}
			t.Logf("README.md:%d: ok in %v", b.line, time.Since(start).Round(time.Millisecond))
			if testing.Verbose() {
				t.Logf("output:\n%s", out)
			}
		})
		ran++
	}
	if ran == 0 {
		t.Fatal("no shell block in README.md")
	}
}

// farm fills work with symbolic links to the checkout's top-level entries
// but .git and bin, so that the blocks' `make build` and `go build` build
// this tree and write their binaries to work/bin.
func farm(t *testing.T, root, work string) {
	t.Helper()
	entries, err := os.ReadDir(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if n := e.Name(); n != ".git" && n != "bin" {
			if err := os.Symlink(filepath.Join(root, n), filepath.Join(work, n)); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// blockEnv is the environment of the blocks: this one's, with HOME empty,
// pathDir first on PATH, the Go caches of this machine (a temporary HOME
// would otherwise mean a cold build cache and a module download) and
// nothing downloaded.
func blockEnv(t *testing.T, home, pathDir string) []string {
	t.Helper()
	goEnv := map[string]string{}
	for _, k := range []string{"GOCACHE", "GOMODCACHE", "GOPATH", "GOROOT"} {
		out, err := exec.Command("go", "env", k).Output()
		if err != nil {
			t.Fatalf("go env %s: %v", k, err)
		}
		goEnv[k] = strings.TrimSpace(string(out))
	}
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		switch {
		case k == "HOME" || k == "PATH" || k == "GOPROXY" || k == "GOTOOLCHAIN" || goEnv[k] != "":
		case strings.HasPrefix(k, "EDGE_"): // the blocks set their own
		default:
			env = append(env, kv)
		}
	}
	for k, v := range goEnv {
		env = append(env, k+"="+v)
	}
	return append(env, "HOME="+home, "GOPROXY=off", "GOTOOLCHAIN=local",
		"PATH="+pathDir+string(os.PathListSeparator)+filepath.Join(goEnv["GOROOT"], "bin")+string(os.PathListSeparator)+os.Getenv("PATH"))
}

// run runs script with bash -e in dir, bounded by d, and returns its
// output.
func run(bash, dir string, env []string, script string, d time.Duration) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	cmd := exec.CommandContext(ctx, bash, "-e", "-c", script)
	cmd.Dir, cmd.Env = dir, env
	return cmd.CombinedOutput()
}

// canIsolate reports whether unshare can give a block its own user, network
// and PID namespaces here, with a loopback interface up.
func canIsolate(bash string) bool {
	if _, err := exec.LookPath("unshare"); err != nil {
		return false
	}
	for _, c := range []string{"ip", "setsid"} {
		if _, err := exec.LookPath(c); err != nil {
			return false
		}
	}
	out, err := exec.Command("unshare", "--user", "--map-root-user", "--net", "--pid", "--fork", "--kill-child",
		bash, "-c", "ip link set lo up && echo $$").Output()
	return err == nil && strings.TrimSpace(string(out)) == "1"
}

// prologue starts every block: it stops, on exit, what the block started.
// Everything the block starts is in its process group: a SIGTERM to the
// group (the shell ignores it), then a wait for the shell's own children.
const prologue = `__readme_stop() {
	rc=$?
	trap - EXIT
	trap '' TERM
	kill -TERM 0 2>/dev/null || true
	wait || true
	exit $rc
}
trap __readme_stop EXIT
`

// runBlock runs one block's commands in dir and returns their output; an
// error when the block failed, or did not end within blockTimeout. With
// isolated, in namespaces of its own (see TestReadmeShellBlocks).
func runBlock(t *testing.T, bash, dir string, env []string, sh string, isolated bool) ([]byte, error) {
	script := filepath.Join(os.TempDir(), fmt.Sprintf("readme-block-%d.sh", time.Now().UnixNano()))
	if err := os.WriteFile(script, []byte(prologue+sh), 0o600); err != nil {
		return nil, err
	}
	defer os.Remove(script)
	var cmd *exec.Cmd
	if isolated {
		cmd = exec.Command("unshare", "--user", "--map-root-user", "--net", "--pid", "--fork", "--kill-child",
			// setsid: the block's process group is the namespace's only.
			bash, "-c", `ip link set lo up && exec setsid "$0" -e "$1"`, bash, script)
	} else {
		cmd = exec.Command(bash, "-e", script)
	}
	var out bytes.Buffer
	cmd.Dir, cmd.Env, cmd.Stdout, cmd.Stderr = dir, env, &out, &out
	cmd.Stdin = nil
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // its own process group: the only one signalled
	// A background process keeps the output pipe open after the shell
	// exits: Wait returns once the group has been stopped (WaitDelay).
	cmd.WaitDelay = stopGrace
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	pgid := cmd.Process.Pid
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var err error
	select {
	case err = <-done:
	case <-time.After(blockTimeout):
		// Isolated, the group is unshare alone, which ignores SIGTERM while
		// it waits for the namespace's first process: killed, it takes the
		// namespace down with it (--kill-child).
		sig := syscall.SIGTERM
		if isolated {
			sig = syscall.SIGKILL
		}
		_ = syscall.Kill(-pgid, sig)
		select {
		case <-done:
		case <-time.After(stopGrace):
			_ = syscall.Kill(-pgid, syscall.SIGKILL)
			<-done // WaitDelay bounds it
		}
		err = fmt.Errorf("did not end within %v", blockTimeout)
	}
	// What the block left in its group (not isolated; isolated, the PID
	// namespace ended with it) is stopped, and killed if it does not stop.
	if syscall.Kill(-pgid, syscall.SIGTERM) == nil {
		stopped := false
		defer func() { // also when poll.Until fails the test
			if !stopped {
				_ = syscall.Kill(-pgid, syscall.SIGKILL)
			}
		}()
		poll.Until(t, stopGrace, "what the block started to stop after SIGTERM", func() (bool, string) {
			stopped = syscall.Kill(-pgid, 0) != nil
			return stopped, "some are still running"
		})
	}
	return out.Bytes(), err
}

// busyPorts returns the ports of 127.0.0.1:PORT in sh that something on this
// machine listens on.
func busyPorts(sh string) []string {
	var busy []string
	for _, m := range regexp.MustCompile(`127\.0\.0\.1:(\d+)`).FindAllStringSubmatch(sh, -1) {
		if c, err := (&net.Dialer{Timeout: time.Second}).Dial("tcp", "127.0.0.1:"+m[1]); err == nil {
			c.Close()
			busy = append(busy, m[1])
		} else if !errors.Is(err, syscall.ECONNREFUSED) {
			busy = append(busy, m[1])
		}
	}
	return busy
}
