package loadgen

import (
	"fmt"
	"strconv"
	"strings"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

// A Descriptor is one rate-limit descriptor of a request: its entries, in order.
type Descriptor []Entry

// An Entry is one key and value of a descriptor.
type Entry struct{ Key, Value string }

// ParseDescriptor parses "key=value,key=value". A value may be empty; a key may not.
func ParseDescriptor(s string) (Descriptor, error) {
	var d Descriptor
	for _, kv := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("--descriptor %q: want key=value,key=value", s)
		}
		d = append(d, Entry{k, v})
	}
	return d, nil
}

// requests builds the requests the workers cycle through: one per tenant.
func requests(cfg Config) ([]*rlsv3.RateLimitRequest, error) {
	di, ei := 0, 0
	if cfg.TenantKey != "" {
		di = -1
		for i, d := range cfg.Descriptors {
			for j, e := range d {
				if e.Key == cfg.TenantKey && di < 0 {
					di, ei = i, j
				}
			}
		}
		if di < 0 {
			return nil, fmt.Errorf("--tenant-key %q is in no --descriptor", cfg.TenantKey)
		}
	}
	reqs := make([]*rlsv3.RateLimitRequest, cfg.Tenants)
	for t := range reqs {
		req := &rlsv3.RateLimitRequest{Domain: cfg.Domain, HitsAddend: cfg.Hits}
		for i, d := range cfg.Descriptors {
			rd := &commonv3.RateLimitDescriptor{}
			for j, e := range d {
				v := e.Value
				if cfg.Tenants > 1 && i == di && j == ei {
					v += "-" + strconv.Itoa(t)
				}
				rd.Entries = append(rd.Entries, &commonv3.RateLimitDescriptor_Entry{Key: e.Key, Value: v})
			}
			req.Descriptors = append(req.Descriptors, rd)
		}
		reqs[t] = req
	}
	return reqs, nil
}
