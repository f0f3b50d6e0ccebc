package metrics

import (
	"github.com/openengine/edge/internal/hist"
	"github.com/openengine/edge/loop"
	"github.com/openengine/edge/rpc"
	"github.com/openengine/edge/upstream"
)

// kind is a metric family's Prometheus type.
type kind uint8

const (
	counter kind = iota
	gauge
	histogram
)

// sink receives a snapshot's metric families in order: family starts one,
// value and hist add its samples. An exposition format implements it.
type sink interface {
	family(name, help string, k kind, labels ...string)
	value(v float64, labelValues ...string)
	hist(h *hist.Hist, labelValues ...string)
}

// The metric names (CONTRACT.md section 12): edge_ prefix, base units,
// counters end in _total, label values bounded (methods by the registry,
// upstreams by the flags, the rest by enums).
const (
	nameConns             = "edge_connections"
	nameAccepted          = "edge_connections_accepted_total"
	nameRejected          = "edge_connections_rejected_total"
	nameClosed            = "edge_connections_closed_total"
	namePaused            = "edge_connections_paused"
	namePending           = "edge_outbound_pending_bytes"
	nameRequests          = "edge_requests_total"
	nameDuration          = "edge_request_duration_seconds"
	nameInFlight          = "edge_requests_in_flight"
	nameSubscriptions     = "edge_subscriptions"
	nameEvents            = "edge_events_delivered_total"
	nameSlow              = "edge_slow_consumers_total"
	nameUpstreamUp        = "edge_upstream_connections_up"
	nameUpstreamConns     = "edge_upstream_connections"
	nameUpstreamRequests  = "edge_upstream_requests_total"
	nameUpstreamDuration  = "edge_upstream_request_duration_seconds"
	nameUpstreamDropped   = "edge_upstream_messages_dropped_total"
	nameUpstreamLate      = "edge_upstream_late_answers_total"
	nameUpstreamNotesLost = "edge_upstream_notifications_dropped_total"
	nameUpstreamSlow      = "edge_upstream_slow_closed_total"
	nameStaleLoops        = "edge_metrics_stale_loops"
	nameLogDropped        = "edge_log_dropped_total"
	labelSlowSubscription = "subscription"
	labelSlowConnection   = "connection"
)

// emit hands every metric of s to k. methods names s.loop.RPC.Methods.
// A method's series appear once it has a request.
func (s *snapshot) emit(k sink, methods []string) {
	st := &s.loop
	byLabel(k, nameConns, "Open client connections by transport, upgrading ones included.", gauge,
		"transport", st.Conns[:], loop.TransportLabel)
	byLabel(k, nameAccepted, "Client connections accepted, by transport.", counter,
		"transport", st.Accepted[:], loop.TransportLabel)
	byLabel(k, nameRejected, "Client connections refused before they spoke JSON-RPC, by reason; accept_paused counts the acceptors' pauses for want of descriptors.", counter,
		"reason", st.Rejected[:], loop.RejectReasonLabel)
	byLabel(k, nameClosed, "Client connections ended, by close code (the server's, or the peer's it answered; 1006: none was exchanged).", counter,
		"code", st.Closes[:], loop.CloseCodeLabel)
	k.family(namePaused, "Client connections whose reads are paused for backpressure.", gauge)
	k.value(float64(st.Paused))
	k.family(namePending, "Output the client connections hold that the kernel has not taken yet.", gauge)
	k.value(float64(st.PendingBytes))

	c := &st.RPC
	k.family(nameRequests, "Requests by method and outcome.", counter, "method", "outcome")
	for i := range c.Methods {
		if i >= len(methods) || !active(&c.Methods[i]) {
			continue
		}
		for o, n := range c.Methods[i].Outcomes {
			k.value(float64(n), methods[i], rpc.Outcome(o).String())
		}
	}
	k.family(nameDuration, "Time from a request's admission to its answer being queued, measured with the event loop's per-turn clock.", histogram, "method")
	for i := range c.Methods {
		if i >= len(methods) || !active(&c.Methods[i]) {
			continue
		}
		k.hist(&c.Methods[i].Duration, methods[i])
	}
	k.family(nameInFlight, "Requests admitted that still owe an answer.", gauge)
	k.value(float64(s.inFlight))
	k.family(nameSubscriptions, "Subscriptions not ended, establishing ones included.", gauge)
	k.value(float64(c.Subscriptions))
	k.family(nameEvents, "Subscription events handed to client connections.", counter)
	k.value(float64(c.EventsDelivered))
	k.family(nameSlow, "Slow consumers: subscriptions ended SLOW_CONSUMER, and connections closed 1008 slow consumer.", counter, "kind")
	k.value(float64(c.SlowSubscriptions), labelSlowSubscription)
	k.value(float64(st.SlowConsumers), labelSlowConnection)

	if len(s.upstreams) > 0 {
		k.family(nameUpstreamUp, "Upstream connections that take calls (an HTTP replica counts as one).", gauge, "upstream")
		for _, u := range s.upstreams {
			k.value(float64(u.st.Up), u.name)
		}
		k.family(nameUpstreamConns, "Upstream connections configured (an HTTP replica counts as one).", gauge, "upstream")
		for _, u := range s.upstreams {
			k.value(float64(u.st.Total), u.name)
		}
		k.family(nameUpstreamRequests, "Calls forwarded to upstreams, by outcome.", counter, "upstream", "outcome")
		for _, u := range s.upstreams {
			for o, n := range u.st.Outcomes {
				k.value(float64(n), u.name, upstream.OutcomeLabel(o))
			}
		}
		k.family(nameUpstreamDuration, "Time from forwarding a call to its answer or failure.", histogram, "upstream")
		for i := range s.upstreams {
			k.hist(&s.upstreams[i].st.Duration, s.upstreams[i].name)
		}
		k.family(nameUpstreamDropped, "Messages from upstreams that were dropped (CONTRACT.md section 10).", counter, "upstream")
		for _, u := range s.upstreams {
			k.value(float64(u.dropped), u.name)
		}
		k.family(nameUpstreamLate, "Answers from upstreams to calls that had timed out already.", counter, "upstream")
		for _, u := range s.upstreams {
			k.value(float64(u.late), u.name)
		}
		k.family(nameUpstreamNotesLost, "Notifications to http upstreams dropped at --upstream-http-conns.", counter, "upstream")
		for _, u := range s.upstreams {
			k.value(float64(u.st.NotificationsDropped), u.name)
		}
		k.family(nameUpstreamSlow, "Upstream connections closed because the upstream did not read their output (--upstream-max-pending-bytes, --upstream-write-stall-timeout).", counter, "upstream")
		for _, u := range s.upstreams {
			k.value(float64(u.st.SlowClosed), u.name)
		}
	}
	k.family(nameStaleLoops, "Event loops that did not answer the last scrape in time; their counters are as of the scrape before.", gauge)
	k.value(float64(st.Stale))
	k.family(nameLogDropped, "Log lines dropped because the log output (stderr) did not keep up.", counter)
	k.value(float64(st.LogDropped))
}

// active reports whether a method has had a request.
func active(m *rpc.MethodCounters) bool {
	for _, n := range m.Outcomes {
		if n != 0 {
			return true
		}
	}
	return false
}

// byLabel hands k a family with one label whose values are
// labelOf(0..len(values)-1).
func byLabel[T int | uint64](k sink, name, help string, typ kind, label string, values []T, labelOf func(int) string) {
	k.family(name, help, typ, label)
	for i, n := range values {
		k.value(float64(n), labelOf(i))
	}
}
