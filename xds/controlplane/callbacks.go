package controlplane

import (
	"context"
	"fmt"
	"strings"
	"sync"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	xdsserver "github.com/envoyproxy/go-control-plane/pkg/server/v3"

	"github.com/rlctl/rlctl/xds"
)

// sent is the last response on a stream for one type.
type sent struct{ nonce, version string }

// streams tracks what each stream was last sent, by stream ID and type URL, so that a NACK can
// be recognised as a rejection of a version.
type streams struct {
	mu   sync.Mutex
	last map[int64]map[string]sent
}

// callbacks count clients, responses and NACKs, and keep a client that rejected a version from
// being sent it again: the snapshot cache answers a request whose version differs from the
// served one at once, so a NACK (which repeats the last version the client accepted) would
// otherwise bring the rejected version straight back, over and over. Marking the NACK's request
// with the version it rejects makes the cache wait for the next version instead.
func (s *Server) callbacks() xdsserver.Callbacks {
	return s.callbacksOf(&streams{last: map[int64]map[string]sent{}})
}

// callbacksOf is callbacks, keeping what was last sent on each stream in st.
func (s *Server) callbacksOf(st *streams) xdsserver.CallbackFuncs {
	open := func(context.Context, int64, string) error {
		s.mx.clients.Inc()
		return nil
	}
	closed := func(id int64, _ *core.Node) {
		s.mx.clients.Dec()
		st.mu.Lock()
		delete(st.last, id)
		st.mu.Unlock()
	}
	return xdsserver.CallbackFuncs{
		StreamOpenFunc:        open,
		StreamClosedFunc:      closed,
		DeltaStreamOpenFunc:   open,
		DeltaStreamClosedFunc: closed,
		StreamRequestFunc: func(id int64, req *discovery.DiscoveryRequest) error {
			if req.GetErrorDetail() == nil {
				return nil
			}
			s.mx.nacks.WithLabelValues(typeLabel(req.GetTypeUrl())).Inc()
			st.mu.Lock()
			last, ok := st.last[id][req.GetTypeUrl()]
			st.mu.Unlock()
			rejected := ""
			if ok && last.nonce == req.GetResponseNonce() {
				rejected = last.version
				req.VersionInfo = rejected
			}
			s.log.Warn("a client rejected a version (NACK); it keeps its last good one",
				"node", clip(req.GetNode().GetId()), "type_url", clip(req.GetTypeUrl()), "version", rejected,
				"error", clip(req.GetErrorDetail().GetMessage()))
			return nil
		},
		StreamResponseFunc: func(_ context.Context, id int64, req *discovery.DiscoveryRequest, resp *discovery.DiscoveryResponse) {
			s.mx.pushes.WithLabelValues(typeLabel(resp.GetTypeUrl())).Inc()
			if typeLabel(resp.GetTypeUrl()) == "other" {
				// Not a served type: nothing a NACK could name, and a client making up type
				// URLs would grow the map for as long as its stream lives.
				return
			}
			st.mu.Lock()
			if st.last[id] == nil {
				st.last[id] = map[string]sent{}
			}
			st.last[id][resp.GetTypeUrl()] = sent{nonce: resp.GetNonce(), version: resp.GetVersionInfo()}
			st.mu.Unlock()
		},
	}
}

// typeLabel is the type_url label of a type a client named: one of the served types, or
// "other", so that clients cannot grow the metrics without bound.
func typeLabel(typeURL string) string {
	switch typeURL {
	case xds.SnapshotTypeURL, xds.RateLimitConfigTypeURL:
		return typeURL
	}
	return "other"
}

// maxLogged is the most bytes of a client's text a log line holds.
const maxLogged = 1024

// clip is a client's text as a log line holds it: its first maxLogged bytes, and how many it
// had. A client sent 200 rejections of 1 MB each, and they were logged whole: 200 MB of log in
// 2.4 s.
func clip(s string) string {
	if len(s) <= maxLogged {
		return s
	}
	return fmt.Sprintf("%s… (%d bytes)", strings.ToValidUTF8(s[:maxLogged], ""), len(s))
}
