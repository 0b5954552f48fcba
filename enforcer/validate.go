package enforcer

import (
	"fmt"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Size caps of a ShouldRateLimit request. A request over one is rejected with InvalidArgument:
// the caps bound the memory and key length the gateway's configuration can make the enforcer
// use. A descriptor's value has none: the client chooses it (a header's value), and a refused
// call is one Envoy's fail-open filter admits whole, with every other descriptor of it
// unchecked. A value longer than engine.MaxKeyValueLen is held in its store key as a digest.
const (
	MaxDomainLen   = 256
	MaxDescriptors = 64
	MaxEntries     = 16
	MaxKeyLen      = 256
	// MaxHits caps hits_addend, on the request and on a descriptor.
	MaxHits = 1_000_000_000
)

// Reasons of rate_limit_invalid_requests_total.
const (
	reasonEmptyDomain     = "empty_domain"
	reasonTooLarge        = "too_large"
	reasonNoDescriptors   = "no_descriptors"
	reasonEmptyDescriptor = "empty_descriptor"
	reasonUnsupported     = "unsupported"
	reasonBadOverride     = "bad_override"
	reasonEmptyKey        = "empty_key"
)

// invalidReasons are every reason, so that each series is exported from the start.
var invalidReasons = []string{reasonEmptyDomain, reasonTooLarge, reasonNoDescriptors,
	reasonEmptyDescriptor, reasonUnsupported, reasonBadOverride, reasonEmptyKey}

// invalid is a request error: a gRPC InvalidArgument status and the metric reason.
type invalid struct {
	reason string
	err    error
}

// validateRequest reports what is wrong with req, or nil. It does not allocate for a valid
// request.
func validateRequest(req *rlsv3.RateLimitRequest) *invalid {
	switch {
	case req.GetDomain() == "":
		return invalidf(reasonEmptyDomain, "domain is empty")
	case len(req.Domain) > MaxDomainLen:
		return invalidf(reasonTooLarge, "domain is %d bytes, over the cap of %d", len(req.Domain), MaxDomainLen)
	case len(req.Descriptors) == 0:
		return invalidf(reasonNoDescriptors, "no descriptors")
	case len(req.Descriptors) > MaxDescriptors:
		return invalidf(reasonTooLarge, "%d descriptors, over the cap of %d", len(req.Descriptors), MaxDescriptors)
	case req.HitsAddend > MaxHits:
		return invalidf(reasonTooLarge, "hits_addend %d is over the cap of %d", req.HitsAddend, MaxHits)
	}
	for i, d := range req.Descriptors {
		switch {
		case d == nil || len(d.Entries) == 0:
			return invalidf(reasonEmptyDescriptor, "descriptor %d has no entries", i)
		case len(d.Entries) > MaxEntries:
			return invalidf(reasonTooLarge, "descriptor %d has %d entries, over the cap of %d", i, len(d.Entries), MaxEntries)
		case d.HitsAddend != nil && d.HitsAddend.Value > MaxHits:
			return invalidf(reasonTooLarge, "descriptor %d: hits_addend %d is over the cap of %d", i, d.HitsAddend.Value, MaxHits)
		case d.IsNegativeHits:
			return invalidf(reasonUnsupported, "descriptor %d: is_negative_hits is not supported", i)
		}
		if l := d.Limit; l != nil {
			if l.RequestsPerUnit == 0 {
				return invalidf(reasonBadOverride, "descriptor %d: limit override has requests_per_unit 0", i)
			}
			if _, ok := overrideWindowMs(l); !ok {
				if l.UnitMultiplier != nil && l.UnitMultiplier.Value > 1 {
					return invalidf(reasonBadOverride, "descriptor %d: limit override of %d × %v is too long a window", i, l.UnitMultiplier.Value, l.Unit)
				}
				return invalidf(reasonBadOverride, "descriptor %d: limit override has unit %v", i, l.Unit)
			}
		}
		for j, e := range d.Entries {
			switch {
			case e == nil || e.Key == "":
				return invalidf(reasonEmptyKey, "descriptor %d entry %d has an empty key", i, j)
			case len(e.Key) > MaxKeyLen:
				return invalidf(reasonTooLarge, "descriptor %d entry %d: key is %d bytes, over the cap of %d", i, j, len(e.Key), MaxKeyLen)
			}
		}
	}
	return nil
}

func invalidf(reason, format string, args ...any) *invalid {
	return &invalid{reason: reason, err: status.Error(codes.InvalidArgument, "ShouldRateLimit: "+fmt.Sprintf(format, args...))}
}
