module github.com/openengine/edge/bench

go 1.26.8

require (
	github.com/HdrHistogram/hdrhistogram-go v1.1.2 // latency percentiles (HDR histograms)
	github.com/gobwas/ws v1.5.0 // client handshake, frame constants, masking
	github.com/schollz/progressbar/v3 v3.19.1 // progress bar for the 15-minute suite (a terminal only; CI gets one line per phase)
	golang.org/x/sys v0.50.0 // sched_setaffinity, getrusage, setpriority, timerfd
	golang.org/x/term v0.44.0 // is stderr a terminal (progress bar or plain lines)
)

require (
	github.com/gobwas/httphead v0.1.0 // indirect
	github.com/mitchellh/colorstring v0.0.0-20190213212951-d06e56a500db // indirect
	github.com/rivo/uniseg v0.4.7 // indirect
)
