package policy

import (
	"net/netip"
	"strings"
)

// Request is what a descriptor source reads from an HTTP request: enough of it to build the
// descriptor entries Envoy's rate-limit actions would build.
type Request struct {
	// Headers holds request headers by lower-case name.
	Headers map[string]string
	// RemoteAddr is the client address Envoy trusts (after x-forwarded-for handling): an IP
	// address, optionally with a port.
	RemoteAddr string
	// Path is the request's :path, query string included.
	Path string
	// Claims holds the verified JWT payload's claims, or is nil when the request carried no
	// valid JWT.
	Claims map[string]string
}

// Entry returns the descriptor entry s produces for req: key s.Key and the value that the Envoy
// action s renders to would produce. It returns false when the action would produce no entry (a
// missing header, claim or address, or a path that does not match), in which case Envoy sends no
// descriptor for the rule.
//
// An identity source's value is "<tier>:<value>" for the first tier of its waterfall that has a
// value; a masked address is written as its network, such as "203.0.113.0/24" or
// "2001:db8:1:2::/64".
//
// (The method is not called Value because Value is the field of a generic_key source.)
func (s *Source) Entry(req Request) (Entry, bool) {
	v, ok := s.value(req)
	return Entry{Key: s.Key, Value: v}, ok
}

func (s *Source) value(req Request) (string, bool) {
	switch s.Kind {
	case SourceHeader:
		return req.header(s.Header)
	case SourceJWTClaim:
		v, ok := req.Claims[s.Claim]
		return v, ok && v != ""
	case SourceRemoteAddress:
		return remoteAddress(req.RemoteAddr, s.Mask)
	case SourceGenericKey:
		return s.Value, true
	case SourcePathMatch:
		if (s.PathExact != "" && req.Path == s.PathExact) ||
			(s.PathPrefix != "" && strings.HasPrefix(req.Path, s.PathPrefix)) {
			return s.Value, true
		}
		return "", false
	case SourceIdentity:
		for _, st := range s.Waterfall {
			var v string
			var ok bool
			switch st.Tier {
			case TierJWTSubject:
				v, ok = req.Claims[st.Claim]
			case TierAPIKey, TierTLSFingerprint:
				v, ok = req.header(st.Header)
			case TierSubnet:
				v, ok = remoteAddress(req.RemoteAddr, MaskSubnet)
			}
			if ok && v != "" {
				return string(st.Tier) + ":" + v, true
			}
		}
	}
	return "", false
}

// header returns a request header; ":path" is the request path, as in Envoy.
func (req Request) header(name string) (string, bool) {
	if name == ":path" {
		return req.Path, req.Path != ""
	}
	v, ok := req.Headers[name]
	if !ok {
		v, ok = req.Headers[strings.ToLower(name)]
	}
	return v, ok
}

// remoteAddress formats addr whole, or as its /24 (IPv4) or /64 (IPv6) network.
func remoteAddress(addr string, mask Mask) (string, bool) {
	ip, err := netip.ParseAddr(addr)
	if err != nil {
		ap, err := netip.ParseAddrPort(addr)
		if err != nil {
			return "", false
		}
		ip = ap.Addr()
	}
	ip = ip.Unmap().WithZone("")
	if mask != MaskSubnet {
		return ip.String(), true
	}
	bits := 64
	if ip.Is4() {
		bits = 24
	}
	p, err := ip.Prefix(bits)
	if err != nil {
		return "", false
	}
	return p.String(), true
}
