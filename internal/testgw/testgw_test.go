package testgw

import (
	"net"
	"strings"
	"testing"
	"time"

	"github.com/openengine/edge/backend"
)

// TestStartServesAndStops: a started gateway accepts on both listeners, and
// once its test's cleanup ran no edge or gnet goroutine is left.
func TestStartServesAndStops(t *testing.T) {
	t.Run("gateway", func(t *testing.T) {
		gw := Start(t, Config{NDJSON: true})
		for _, a := range []net.Addr{gw.Srv.Addr(), gw.Srv.NDJSONAddr()} {
			c, err := net.DialTimeout("tcp", a.String(), 5*time.Second)
			if err != nil {
				t.Fatalf("dial %s: %v", a, err)
			}
			c.Close()
		}
	})
	if leaked := LeakedGoroutines(5 * time.Second); leaked != "" {
		t.Fatalf("left behind after cleanup:\n%s", leaked)
	}
}

// TestLeakedGoroutinesSeesWorkers: a backend worker still running is
// reported, and no longer once it returned.
func TestLeakedGoroutinesSeesWorkers(t *testing.T) {
	pool := backend.NewPool(1, time.Second)
	release := make(chan struct{})
	started := make(chan struct{})
	pool.Submit(jobFunc(func() { close(started); <-release }))
	<-started
	if leaked := LeakedGoroutines(0); !strings.Contains(leaked, "backend.(*Pool)") {
		t.Fatalf("a running worker was not reported; got:\n%s", leaked)
	}
	close(release)
	pool.Close()
	if leaked := LeakedGoroutines(5 * time.Second); leaked != "" {
		t.Fatalf("left behind after the pool closed:\n%s", leaked)
	}
}

type jobFunc func()

func (f jobFunc) Run() { f() }
