package policy

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"unsafe"
)

// Request is what a descriptor source reads from an HTTP request: enough of it to build the
// descriptor entries Envoy's rate-limit actions would build.
type Request struct {
	// Headers holds request headers by lower-case name.
	Headers map[string]string
	// HeaderList holds more request headers as pairs with lower-case names, for callers that
	// build a request per access-log line and would otherwise fill a map for a few lookups. A
	// name found here takes precedence over Headers; of several pairs with one name the last
	// counts, as if they were put into a map in order.
	HeaderList []Header
	// RemoteAddr is the client address Envoy trusts (after x-forwarded-for handling): an IP
	// address, optionally with a port.
	RemoteAddr string
	// Path is the request's :path, query string included.
	Path string
	// Claims holds the verified JWT payload's claims, or is nil when the request carried no
	// valid JWT.
	Claims map[string]string
	// ClaimList holds more claims as pairs, for callers that decode a token once and look its
	// claims up on many requests: a scan of a token's few claims costs less than hashing the
	// name. A name found here takes precedence over Claims; of several pairs with one name the
	// last counts, as if they were put into a map in order.
	ClaimList []Claim
}

// Claim is one JWT claim, its value written as a string.
type Claim struct {
	Name, Value string
	// NotString says the claim's JSON value is a number or a boolean, which Value holds as
	// JSON writes it. Envoy's metadata action reads string values only, so a jwt_claim source
	// has no entry for such a claim (its rule gets no descriptor); the identity waterfall's
	// jwt_subject tier, whose header Envoy formats from the value, reads its text.
	NotString bool
}

// Header is one request header.
type Header struct {
	Name  string // lower case
	Value string
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
	var addr addrForms
	v, ok := s.value(&req, &addr)
	return Entry{Key: s.Key, Value: v}, ok
}

// AppendValues appends to values the value of each source's entry for req (Entry's), and to oks
// whether the source has an entry. The sources share one parse of the remote address and each
// of its forms is formatted once, which matters to callers that evaluate every source of a
// domain for each of millions of logged requests.
func (req *Request) AppendValues(values []string, oks []bool, sources []*Source) ([]string, []bool) {
	return req.AppendValuesIn(values, oks, sources, nil)
}

// AppendValuesIn is AppendValues that writes the values it builds (an identity value with its
// tier, an address form that is not a prefix of RemoteAddr) into *arena, a buffer the caller
// reuses, instead of allocating each: they view the arena's bytes and stay valid until the
// caller reuses them (sets the arena to (*arena)[:0]), so that a caller replaying millions of
// logged requests pays no allocation per value. When the arena is full it starts a new buffer
// and leaves the full one to the values that view it. A nil arena allocates as AppendValues
// does. A caller must clone any value it keeps beyond the arena's reuse.
func (req *Request) AppendValuesIn(values []string, oks []bool, sources []*Source, arena *[]byte) ([]string, []bool) {
	addr := addrForms{arena: arena}
	// Grown once and written in place: two appends a source were most of the loop's own work.
	nv, no := len(values), len(oks)
	values = slices.Grow(values, len(sources))[:nv+len(sources)]
	oks = slices.Grow(oks, len(sources))[:no+len(sources)]
	for i, s := range sources {
		values[nv+i], oks[no+i] = s.value(req, &addr)
	}
	return values, oks
}

func (s *Source) value(req *Request, addr *addrForms) (string, bool) {
	switch s.Kind {
	case SourceHeader:
		return req.header(s.Header)
	case SourceJWTClaim:
		v, str, ok := req.claim(s.Claim)
		return v, ok && str && v != ""
	case SourceRemoteAddress:
		if s.Mask == MaskSubnet {
			return addr.subnet(req.RemoteAddr)
		}
		return addr.whole(req.RemoteAddr)
	case SourceGenericKey:
		return s.Value, true
	case SourcePathMatch:
		if (s.PathExact != "" && pathIs(req.Path, s.PathExact)) ||
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
				v, _, ok = req.claim(st.Claim)
			case TierAPIKey, TierTLSFingerprint:
				v, ok = req.header(st.Header)
			case TierSubnet:
				// Formatted with its tier prefix once per request (addrForms.subnet).
				if _, ok := addr.subnet(req.RemoteAddr); ok {
					return addr.tierSubnet, true
				}
			}
			if ok && v != "" {
				return addr.join(string(st.Tier), ":", v), true
			}
		}
	}
	return "", false
}

// header returns a request header; ":path" is the request path, and "host" the ":authority"
// header, as in Envoy (whose header map looks "host" up as ":authority").
func (req *Request) header(name string) (string, bool) {
	if name == ":path" {
		return req.Path, req.Path != ""
	}
	if strings.EqualFold(name, "host") {
		if v, ok := req.header(":authority"); ok {
			return v, true
		}
	}
	if v, ok := LastHeader(req.HeaderList, name); ok {
		return v, true
	}
	// Names are lower case in both places; a name that is not is looked up lower-cased too,
	// which costs a scan of it on every miss, so it is lower-cased once for both.
	lower := strings.ToLower(name)
	if lower != name {
		if v, ok := LastHeader(req.HeaderList, lower); ok {
			return v, true
		}
	}
	if v, ok := req.Headers[name]; ok || lower == name {
		return v, ok
	}
	v, ok := req.Headers[lower]
	return v, ok
}

// claim returns a claim of the request's JWT, from ClaimList or else Claims, and whether its
// value is a string (Claim.NotString; the values of Claims are).
func (req *Request) claim(name string) (v string, str, ok bool) {
	if c := lastClaim(req.ClaimList, name); c != nil {
		return c.Value, !c.NotString, true
	}
	v, ok = req.Claims[name]
	return v, true, ok
}

// LastClaim returns the value of the last claim named name in claims, as Request.ClaimList
// reads them.
func LastClaim(claims []Claim, name string) (string, bool) {
	if c := lastClaim(claims, name); c != nil {
		return c.Value, true
	}
	return "", false
}

func lastClaim(claims []Claim, name string) *Claim {
	for i := len(claims) - 1; i >= 0; i-- {
		if c := &claims[i]; c.Name == name {
			return c
		}
	}
	return nil
}

// LastHeader returns the value of the last header named name in hs, as Request.HeaderList
// reads them. Names are compared as they are: HeaderList's are lower case.
func LastHeader(hs []Header, name string) (string, bool) {
	for i := len(hs) - 1; i >= 0; i-- {
		if hs[i].Name == name {
			return hs[i].Value, true
		}
	}
	return "", false
}

// addrForms is a request's remote address as sources write it, each form made on first use.
type addrForms struct {
	parsed bool
	ip     netip.Addr
	ok     bool
	// canonical says the text is an IPv4 address as netip writes it (canonicalIPv4): it is
	// then its own whole form, and its subnet is its first three fields and ".0/24".
	canonical bool
	wholeDone bool
	wholeV    string
	// tierSubnet is the identity value "subnet:<network>"; a remote_address source's subnet is
	// its suffix, so both cost one allocation.
	tierSubnet string
	arena      *[]byte // where built values go (AppendValuesIn); nil: allocate each
}

// tierSubnetPrefix starts a subnet tier's identity value.
const tierSubnetPrefix = string(TierSubnet) + ":"

// arenaChunk is the smallest buffer AppendValuesIn starts in an arena.
const arenaChunk = 64 << 10

// join returns the concatenation of p, q and r (any may be empty), written into the arena when
// there is one. Without one it is p + q + r, which is p itself when q and r are empty and p is
// not on the stack: a caller whose lone part views a buffer that it reuses needs the arena,
// which always copies. Its callers have at most three parts, and three fixed ones cost a third
// of the loops over a variadic list, which ran for every request's identity and subnet values.
func (a *addrForms) join(p, q, r string) string {
	n := len(p) + len(q) + len(r)
	if n == 0 {
		return ""
	}
	if a.arena == nil {
		return p + q + r
	}
	buf := *a.arena // a local slice: appending through the pointer reloads and stores it each time
	if cap(buf)-len(buf) < n {
		buf = make([]byte, 0, max(arenaChunk, n))
	}
	at := len(buf)
	buf = append(append(append(buf, p...), q...), r...)
	*a.arena = buf
	return unsafe.String(&buf[at], n)
}

func (a *addrForms) parse(addr string) bool {
	if !a.parsed {
		a.parsed = true
		if b, ok := canonicalIPv4(addr); ok {
			a.ip, a.ok, a.canonical = netip.AddrFrom4(b), true, true
		} else {
			a.ip, a.ok = parseRemoteAddr(addr)
		}
	}
	return a.ok
}

// canonicalIPv4 reads s when it is an IPv4 address without a port, written as netip writes
// one: four decimal fields of 0 to 255, without leading zeros. That is how most logs and
// gateways write a client's address, and reading it here is a fraction of the cost of netip's
// general parser and of writing the address back out. Anything else is not read (false).
func canonicalIPv4(s string) (ip [4]byte, ok bool) {
	// The fields go into one integer rather than into ip byte by byte: the caller's read of ip
	// as a whole would otherwise wait for four one-byte stores to land.
	var v uint32
	field, n, digits := 0, 0, 0
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c >= '0' && c <= '9':
			if digits > 0 && n == 0 {
				return ip, false // a leading zero
			}
			n, digits = n*10+int(c-'0'), digits+1
			if n > 255 {
				return ip, false
			}
		case c == '.' && digits > 0 && field < 3:
			v = v<<8 | uint32(n)
			field, n, digits = field+1, 0, 0
		default:
			return ip, false
		}
	}
	if field != 3 || digits == 0 {
		return ip, false
	}
	binary.BigEndian.PutUint32(ip[:], v<<8|uint32(n))
	return ip, true
}

// whole is the address without port or zone. Usually that is a prefix of the text the request
// carried ("203.0.113.7" or "203.0.113.7:5555"), which is returned without a copy.
func (a *addrForms) whole(addr string) (string, bool) {
	if !a.parse(addr) {
		return "", false
	}
	if !a.wholeDone {
		a.wholeDone = true
		if a.canonical {
			a.wholeV = addr
			return addr, true
		}
		var buf [64]byte
		b := a.ip.AppendTo(buf[:0])
		if strings.HasPrefix(addr, string(b)) {
			a.wholeV = addr[:len(b)]
		} else {
			a.wholeV = a.join(unsafe.String(&b[0], len(b)), "", "")
		}
	}
	return a.wholeV, true
}

// subnet is the address's /24 (IPv4) or /64 (IPv6) network.
func (a *addrForms) subnet(addr string) (string, bool) {
	if !a.parse(addr) {
		return "", false
	}
	if a.tierSubnet == "" && a.canonical {
		// The network of a.b.c.d/24 is a.b.c.0/24, written as its text has a.b.c.
		a.tierSubnet = a.join(tierSubnetPrefix, addr[:strings.LastIndexByte(addr, '.')], ".0/24")
	}
	if a.tierSubnet == "" {
		bits := 64
		if a.ip.Is4() {
			bits = 24
		}
		p, err := a.ip.Prefix(bits)
		if err != nil {
			return "", false
		}
		var buf [64]byte
		b := p.AppendTo(append(buf[:0], tierSubnetPrefix...))
		a.tierSubnet = a.join(unsafe.String(&b[0], len(b)), "", "")
	}
	return a.tierSubnet[len(tierSubnetPrefix):], true
}

// parseRemoteAddr reads an IP address, optionally with a port, without its zone.
func parseRemoteAddr(addr string) (netip.Addr, bool) {
	ip, err := netip.ParseAddr(addr)
	if err != nil {
		ap, err := netip.ParseAddrPort(addr)
		if err != nil {
			return netip.Addr{}, false
		}
		ip = ap.Addr()
	}
	return ip.Unmap().WithZone(""), true
}

// pathIs reports whether the request path p (":path", with its query) is the path exact with
// any query or none: a caller must not skip a path_match source by adding "?" to the path.
func pathIs(p, exact string) bool {
	rest, ok := strings.CutPrefix(p, exact)
	return ok && (rest == "" || rest[0] == '?')
}

// Describe says how s builds its entry, such as "header x-tenant-id" or "path exact /v1/orders →
// orders": two sources whose descriptions are equal produce the same value from every request.
func (s *Source) Describe() string {
	switch s.Kind {
	case SourceHeader:
		return "header " + s.Header
	case SourceJWTClaim:
		return fmt.Sprintf("jwt claim %s (%s/%s)", s.Claim, s.MetadataNamespace, s.MetadataKey)
	case SourceRemoteAddress:
		return "remote address, mask " + string(cmp.Or(s.Mask, MaskNone))
	case SourceGenericKey:
		return "generic key " + s.Value
	case SourcePathMatch:
		if s.PathExact != "" {
			return fmt.Sprintf("path exact %s → %s", s.PathExact, s.Value)
		}
		return fmt.Sprintf("path prefix %s → %s", s.PathPrefix, s.Value)
	case SourceIdentity:
		steps := make([]string, len(s.Waterfall))
		for i, st := range s.Waterfall {
			steps[i] = string(st.Tier)
			if v := st.Header + st.Claim; v != "" {
				steps[i] += "(" + v + ")"
			}
			if st.Tier == TierSubnet && s.Mask == MaskNone {
				steps[i] += "(whole address)"
			}
		}
		return "identity " + strings.Join(steps, " > ")
	}
	return string(s.Kind)
}
