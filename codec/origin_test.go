package codec

import "testing"

// TestOriginAllowed: the rows of CONTRACT.md section 11.2.
func TestOriginAllowed(t *testing.T) {
	tests := []struct {
		name         string
		origin, host string // "" origin: no header
		repeated     bool
		allow        []string
		want         bool
	}{
		{name: "no origin", host: "edge.example:8080", want: true},
		{name: "same host and port", origin: "https://edge.example:8080", host: "edge.example:8080", want: true},
		{name: "same host, case differs", origin: "http://Edge.Example", host: "edge.example", want: true},
		{name: "same host, other port", origin: "http://edge.example:9999", host: "edge.example:8080", want: false},
		{name: "foreign", origin: "https://evil.example", host: "edge.example", want: false},
		{name: "null", origin: "null", host: "edge.example", want: false},
		{name: "listed", origin: "https://app.example", host: "edge.example", allow: []string{"https://app.example"}, want: true},
		{name: "listed, host case", origin: "https://APP.example", host: "edge.example", allow: []string{"https://app.EXAMPLE"}, want: true},
		{name: "listed, other scheme", origin: "http://app.example", host: "edge.example", allow: []string{"https://app.example"}, want: false},
		{name: "listed, other port", origin: "https://app.example:444", host: "edge.example", allow: []string{"https://app.example"}, want: false},
		{name: "star", origin: "https://evil.example", host: "edge.example", allow: []string{"*"}, want: true},
		{name: "repeated", origin: "https://edge.example", host: "edge.example", repeated: true, want: false},
		{name: "repeated with star", origin: "https://edge.example", host: "edge.example", repeated: true, allow: []string{"*"}, want: true},
		{name: "no scheme", origin: "edge.example", host: "edge.example", want: false},
	}
	for _, tt := range tests {
		r := &Request{Host: []byte(tt.host)}
		if tt.origin != "" {
			r.Origin = []byte(tt.origin)
		}
		if tt.repeated {
			r.Repeated |= RepeatedOrigin
		}
		if got := OriginAllowed(r, tt.allow); got != tt.want {
			t.Errorf("%s: OriginAllowed(Origin %q, Host %q, allow %q) = %v, want %v", tt.name, tt.origin, tt.host, tt.allow, got, tt.want)
		}
	}
}

func TestOriginAllowedDoesNotAllocate(t *testing.T) {
	r := &Request{Host: []byte("edge.example"), Origin: []byte("https://app.example")}
	allow := []string{"https://other.example", "https://app.example"}
	if n := testing.AllocsPerRun(100, func() { OriginAllowed(r, allow) }); n != 0 {
		t.Fatalf("%v allocations", n)
	}
}
