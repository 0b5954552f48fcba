package simulate

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"math/bits"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
	"unsafe"

	"github.com/rlctl/rlctl/policy"
	"github.com/rlctl/rlctl/simulate/accesslog"
)

// requestBuilder turns access-log records into policy.Requests, reusing one header list. JWT
// claims are decoded from the Authorization header's bearer token WITHOUT verifying its
// signature: the log records what the gateway saw, and the simulator only needs the claims
// Envoy's jwt_authn filter would have put into dynamic metadata.
type requestBuilder struct {
	headers []policy.Header
	// tokens caches what a JWT's payload segment decodes to, in two generations: a token is
	// looked up in the current one, then in the older one, from which it moves up. When the
	// current one is full it becomes the older one, so a working set of up to maxCachedTokens
	// tokens stays cached, and memory stays bounded.
	tokens, older map[tokenKey]*token
	tokenCap      int // the size of a generation; maxCachedTokens but in tests
	// recent holds the tokens seen last, one in each slot (recentSlot of its payload), in front
	// of the generations: a payload found there costs a comparison, where the generations cost
	// two hashes of it and, in maps of tens of thousands of tokens, a cache miss. A log's
	// tokens are few and busy (a client's, a tenant's) among many seen a few times; in the
	// benchmark log eight tokens carry half of the 750,000 requests with one. A token in recent
	// is in the current generation too, and recent is emptied when a generation begins, so the
	// generations hold what they would without it.
	recent *[recentTokens]recentToken

	// claimNames are the claims a token keeps (claimNames): the ones the sources read.
	claimNames []string
	// builtins are the request headers sources read that a log's own fields hold.
	builtins builtinHeaders

	// Scratch of Simulator.prepare, which runs on the builder's goroutine: each descriptor
	// shape's entries, their keys set once (Simulator.shapeEntries) and their values each
	// request's, by domain and shape; and a TLS-fingerprint user. Here, one of each per
	// goroutine stays in its cache; in each prepared record they were 1,024 of each a chunk,
	// cold at every use.
	entries [][][]policy.Entry
	user    []byte
	hashes  valueHashes // of the domain selectRules is at
	// classes holds the classes of a record's values (policy.Selector.Class), by domain and
	// source: those of domainSim.classed, set where the value is present.
	classes [][]uint32
	// Scratch of tokenOf: a payload decoded, and the claims kept of it, viewing it.
	payload []byte
	kept    []policy.Claim
}

// tokenKey identifies a JWT payload segment by two independent 64-bit hashes of it, as
// keyTable identifies a store key: two payloads share both about once in 2^128 tries, and a
// lookup neither compares nor keeps the payload's bytes, which would cost a cache miss and a
// copy of each new token.
type tokenKey [2]uint64

func tokenKeyOf(payload string) tokenKey {
	b := unsafe.Slice(unsafe.StringData(payload), len(payload)) // read only
	return tokenKey{keyHash(b), keyID(b)}
}

// token is a decoded JWT payload: the claims of it that the sources read. Most tokens in a
// log are seen once or a few times, so a token is small: one object and one string, where
// all of its claims, each name and value a string, were six or more allocations.
type token struct {
	claims []policy.Claim // as policy.Request.ClaimList holds them; nil when undecodable
	user   string         // "sub:" + the subject, the shared-NAT check's user; "" without one
	// userHash is userHash(user), worked out once for all the requests that carry the token.
	userHash uint64
	inline   [2]policy.Claim
}

// maxCachedTokens is the size of a generation of requestBuilder.tokens.
const maxCachedTokens = 1 << 16

const (
	// recentTokens is the number of slots of requestBuilder.recent, 2 to the power recentBits.
	recentBits   = 8
	recentTokens = 1 << recentBits
)

// maxRecentPayload is the longest payload segment that requestBuilder.recent keeps, so that its
// copies take at most a megabyte (256 slots of 4 KB) whatever a log's tokens (a line may have a
// megabyte): a JWT's payload is a few hundred bytes.
const maxRecentPayload = 4 << 10

// recentToken is a slot of requestBuilder.recent: a token and a copy of its payload segment.
// The copy's array is reused by the slot's next token, and is never larger than the longest
// payload the slot has kept (not grown by append, which could take it past maxRecentPayload).
type recentToken struct {
	payload []byte
	t       *token
}

// recentSlot is the slot of requestBuilder.recent for a JWT payload segment. It reads the
// length and two words, after the first 12 bytes (base64 of the object's first key, the same
// in most tokens) and from the middle, rather than hash all of it: a slot is only a place to
// look, and its token is returned only when the payloads are equal.
func recentSlot(payload string) int {
	h := uint64(len(payload))
	if n := len(payload); n >= 24 {
		b := unsafe.Slice(unsafe.StringData(payload), n) // read only
		h ^= binary.LittleEndian.Uint64(b[12:]) ^ bits.RotateLeft64(binary.LittleEndian.Uint64(b[n/2:]), 29)
	} else {
		for i := 0; i < n; i++ {
			h = h*31 + uint64(payload[i])
		}
	}
	return int((h * 0x9e3779b97f4a7c15) >> (64 - recentBits))
}

// noToken stands for an Authorization header without a JWT. It is shared: never modify it.
var noToken token

// newRequestBuilder returns a builder whose tokens keep the claims named claims (claimNames)
// and the subject.
func newRequestBuilder(claims []string) *requestBuilder {
	return &requestBuilder{tokens: map[tokenKey]*token{}, tokenCap: maxCachedTokens, claimNames: claims,
		recent: new([recentTokens]recentToken)}
}

// claimNames returns the JWT claims that sources read (jwt_claim sources, and identity
// sources' jwt_subject tiers), and "sub", the shared-NAT check's user, each once.
func claimNames(sources []*policy.Source) []string {
	names := []string{"sub"}
	add := func(name string) {
		if !slices.Contains(names, name) {
			names = append(names, name)
		}
	}
	for _, src := range sources {
		switch src.Kind {
		case policy.SourceJWTClaim:
			add(src.Claim)
		case policy.SourceIdentity:
			for _, st := range src.Waterfall {
				if st.Tier == policy.TierJWTSubject {
					add(st.Claim)
				}
			}
		}
	}
	return names
}

// build fills a policy.Request from rec, and returns the JWT it carries: nil without an
// Authorization header, and noToken (no claims, no user) when the header holds no decodable
// JWT. The request is valid until the next call.
func (b *requestBuilder) build(rec *accesslog.Record) (policy.Request, *token) {
	// A list, not a map: a record has a handful of headers and sources look up a few of them.
	// Later pairs take precedence, as the map this replaces was filled in this order.
	b.headers = b.headers[:0]
	for _, h := range rec.Headers {
		b.headers = append(b.headers, policy.Header{Name: h.Name, Value: h.Value})
	}
	if rec.Method != "" {
		b.headers = append(b.headers, policy.Header{Name: ":method", Value: rec.Method})
	}
	if rec.Authority != "" {
		b.headers = append(b.headers, policy.Header{Name: ":authority", Value: rec.Authority})
	}
	if rec.UserAgent != "" {
		b.headers = append(b.headers, policy.Header{Name: "user-agent", Value: rec.UserAgent})
	}
	if b.builtins.xff && rec.XFF != "" {
		b.headers = append(b.headers, policy.Header{Name: "x-forwarded-for", Value: rec.XFF})
	}
	if b.builtins.requestID && rec.RequestID != "" {
		b.headers = append(b.headers, policy.Header{Name: "x-request-id", Value: rec.RequestID})
	}
	req := policy.Request{HeaderList: b.headers, RemoteAddr: rec.ClientIP(), Path: rec.Path}
	var tok *token
	if auth, _ := policy.LastHeader(b.headers, "authorization"); auth != "" {
		tok = b.tokenOf(auth)
		req.ClaimList = tok.claims
	}
	return req, tok
}

// builtinHeaders says which of the request headers that a log's own fields hold (rather than
// its captured headers: the reader reads x_forwarded_for and x-forwarded-for into the record's
// XFF, request_id and x-request-id into its RequestID) the sources read, so that build gives
// them to the request as headers too. :method, :authority and user-agent are always given.
type builtinHeaders struct {
	xff, requestID bool
}

// builtinHeadersOf returns which of headers, the lower-case names the sources read
// (HeadersFor), are held by fields.
func builtinHeadersOf(headers []string) builtinHeaders {
	return builtinHeaders{xff: slices.Contains(headers, "x-forwarded-for"), requestID: slices.Contains(headers, "x-request-id")}
}

// tokenOf decodes the JWT in an Authorization header value. Tokens are cached by their payload
// segment, all that their claims come from, rather than by the whole header: it is the shorter key.
func (b *requestBuilder) tokenOf(auth string) *token {
	payload, ok := jwtPayload(auth)
	if !ok {
		return &noToken
	}
	if len(payload) > maxRecentPayload {
		return b.cachedToken(payload)
	}
	r := &b.recent[recentSlot(payload)]
	if r.t != nil && string(r.payload) == payload {
		return r.t
	}
	t := b.cachedToken(payload)
	if cap(r.payload) < len(payload) {
		r.payload = make([]byte, 0, len(payload))
	}
	r.payload, r.t = append(r.payload[:0], payload...), t
	return t
}

// cachedToken is tokenOf's lookup in the generations, for a payload not in b.recent.
func (b *requestBuilder) cachedToken(payload string) *token {
	k := tokenKeyOf(payload)
	if t, ok := b.tokens[k]; ok {
		return t
	}
	t, ok := b.older[k]
	if !ok {
		t = b.decode(payload)
	}
	if len(b.tokens) >= b.tokenCap {
		b.tokens, b.older = make(map[tokenKey]*token, len(b.tokens)), b.tokens
		for i := range b.recent {
			b.recent[i].t = nil // the older generation's tokens may be forgotten next
		}
	}
	b.tokens[k] = t
	return t
}

// decode decodes a JWT payload segment (appendClaims), keeping only the claims b's sources
// read (b.claimNames), in the order appendClaims gives them. Their values, and the
// user, are views of one string.
func (b *requestBuilder) decode(payload string) *token {
	t := &token{}
	kept, ok := appendClaims(b.kept[:0], &b.payload, payload, b.claimNames)
	b.kept = kept
	if !ok {
		return t
	}
	// One string holds the user ("sub:" and the subject) and every value kept.
	sub, _ := policy.LastClaim(kept, "sub")
	n := 0
	for _, c := range kept {
		n += len(c.Value)
	}
	var text strings.Builder
	text.Grow(len("sub:") + len(sub) + n)
	if sub != "" {
		text.WriteString("sub:")
		text.WriteString(sub)
	}
	for _, c := range kept {
		text.WriteString(c.Value)
	}
	all := text.String()
	t.user, all = all[:text.Len()-n], all[text.Len()-n:]
	if t.user != "" {
		t.userHash = userHash(t.user)
	}
	t.claims = t.inline[:0]
	for _, c := range kept {
		t.claims = append(t.claims, policy.Claim{Name: c.Name, Value: all[:len(c.Value)], NotString: c.NotString})
		all = all[len(c.Value):]
	}
	clear(kept) // let the payload's views go
	return t
}

// appendClaims decodes a JWT payload segment into *raw (reusing it) and appends its claims to
// claims, all of them, or with names only those so named: in the payload's order when
// scanFlatClaims takes it, else one per name in name order (slowClaims). It reports false when
// the payload is not base64url or not a JSON object. The names and values it appends may view
// *raw: they are valid until *raw is reused.
func appendClaims(claims []policy.Claim, raw *[]byte, payload string, names []string) ([]policy.Claim, bool) {
	var err error
	src := unsafe.Slice(unsafe.StringData(payload), len(payload)) // read only
	if *raw, err = base64.RawURLEncoding.AppendDecode((*raw)[:0], bytes.TrimRight(src, "=")); err != nil {
		return claims, false
	}
	at := len(claims)
	add := func(name, value string, notString bool) {
		if names == nil {
			claims = append(claims, policy.Claim{Name: name, Value: value, NotString: notString})
		} else if i := slices.Index(names, name); i >= 0 {
			claims = append(claims, policy.Claim{Name: names[i], Value: value, NotString: notString})
		}
	}
	if scanFlatClaims(*raw, add) {
		return claims, true
	}
	claims = claims[:at] // what the fast path took before it gave up
	all := slowClaims(*raw)
	for _, c := range all {
		add(c.Name, c.Value, c.NotString)
	}
	return claims, all != nil
}

// jwtPayload returns the payload segment of the JWT in an Authorization header value, if the
// value holds a three-segment token.
func jwtPayload(auth string) (string, bool) {
	tok := strings.TrimSpace(auth)
	if len(tok) > 7 && strings.EqualFold(tok[:7], "bearer ") {
		tok = strings.TrimSpace(tok[7:])
	}
	_, rest, ok := strings.Cut(tok, ".")
	if !ok {
		return "", false
	}
	payload, sig, ok := strings.Cut(rest, ".")
	if !ok || strings.Contains(sig, ".") {
		return "", false
	}
	return payload, true
}

// slowClaims decodes a JWT payload that scanFlatClaims does not take, with json.Unmarshal, into
// its claims, one per name (the last, as json.Unmarshal keeps it) in name order, or returns nil
// when it is not a JSON object.
func slowClaims(raw []byte) []policy.Claim {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil {
		return nil
	}
	claims := make([]policy.Claim, 0, len(fields))
	for k, v := range fields {
		if s, str, ok := claimString(v); ok {
			claims = append(claims, policy.Claim{Name: k, Value: s, NotString: !str})
		}
	}
	slices.SortFunc(claims, func(a, b policy.Claim) int { return strings.Compare(a.Name, b.Name) })
	return claims
}

// claimString writes a claim's JSON value as a string, and says whether it is one (str): a
// string as it is, a number or boolean as JSON writes it, null as "" (a string, as
// json.Unmarshal into a string leaves it; an empty value has no entry anyway). Objects and
// arrays have no string form. Values that need no unescaping are converted directly;
// reflection-driven json.Unmarshal, three tries per value, was most of the cost of a token.
func claimString(v json.RawMessage) (s string, str, ok bool) {
	if len(v) == 0 {
		return "", false, false
	}
	switch c := v[0]; {
	case c == '"' && len(v) >= 2 && v[len(v)-1] == '"':
		if s := v[1 : len(v)-1]; bytes.IndexByte(s, '\\') < 0 && utf8.Valid(s) {
			return string(s), true, true
		}
	case string(v) == "true", string(v) == "false":
		return string(v), false, true
	case string(v) == "null":
		return "", true, true
	case c == '-' || (c >= '0' && c <= '9'):
		if isNumberText(v) {
			return string(v), false, true // json.Number keeps the literal
		}
	}
	if json.Unmarshal(v, &s) == nil {
		return s, true, true
	}
	var n json.Number
	if json.Unmarshal(v, &n) == nil {
		return n.String(), false, true
	}
	var bv bool
	if json.Unmarshal(v, &bv) == nil {
		return strconv.FormatBool(bv), false, true
	}
	return "", false, false
}

// isNumberText reports whether v holds only the characters of a JSON number; v comes from a
// document json.Unmarshal accepted, so it is then a valid number.
func isNumberText(v []byte) bool {
	for _, c := range v {
		if (c < '0' || c > '9') && c != '-' && c != '+' && c != '.' && c != 'e' && c != 'E' {
			return false
		}
	}
	return true
}

// scanFlatClaims reads the common payload, a JSON object of plain values, without reflection,
// calling fn with each claim's name and value, in order, as views of raw (or constants), valid
// while raw is. json.Unmarshal was most of the cost of a token, and most tokens in a
// log are seen once. It gives up (false) on anything outside that subset, leaving it to
// json.Unmarshal (slowClaims), perhaps after some calls of fn: nested values, strings with
// escapes or bytes outside printable ASCII, and malformed JSON. What it accepts is valid JSON,
// decoded as slowClaims would.
func scanFlatClaims(raw []byte, fn func(name, value string, notString bool)) bool {
	i := skipJSONSpace(raw, 0)
	if i >= len(raw) || raw[i] != '{' {
		return false
	}
	i = skipJSONSpace(raw, i+1)
	if i < len(raw) && raw[i] == '}' {
		return skipJSONSpace(raw, i+1) == len(raw)
	}
	for {
		key, next, ok := plainJSONString(raw, i)
		if !ok {
			return false
		}
		i = skipJSONSpace(raw, next)
		if i >= len(raw) || raw[i] != ':' {
			return false
		}
		i = skipJSONSpace(raw, i+1)
		if i >= len(raw) {
			return false
		}
		var v string
		notString := true
		switch c := raw[i]; {
		case c == '"':
			if v, i, ok = plainJSONString(raw, i); !ok {
				return false
			}
			notString = false
		case c == '-' || (c >= '0' && c <= '9'):
			n := jsonNumberLen(raw[i:])
			if n == 0 {
				return false
			}
			v, i = view(raw[i:i+n]), i+n
		case bytes.HasPrefix(raw[i:], []byte("true")):
			v, i = "true", i+4
		case bytes.HasPrefix(raw[i:], []byte("false")):
			v, i = "false", i+5
		case bytes.HasPrefix(raw[i:], []byte("null")):
			v, i, notString = "", i+4, false // as json.Unmarshal into a string leaves it
		default:
			return false
		}
		fn(key, v, notString)
		i = skipJSONSpace(raw, i)
		if i >= len(raw) {
			return false
		}
		switch raw[i] {
		case ',':
			i = skipJSONSpace(raw, i+1)
		case '}':
			return skipJSONSpace(raw, i+1) == len(raw)
		default:
			return false
		}
	}
}

// view is b as a string, without a copy: valid while b's bytes are.
func view(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }

func skipJSONSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// plainJSONString reads a string at b[i] made of printable ASCII without escapes, returning
// it (a view of b) and the index after its closing quote.
func plainJSONString(b []byte, i int) (string, int, bool) {
	if i >= len(b) || b[i] != '"' {
		return "", 0, false
	}
	for j := i + 1; j < len(b); j++ {
		switch c := b[j]; {
		case c == '"':
			return view(b[i+1 : j]), j + 1, true
		case c == '\\' || c < 0x20 || c > 0x7e:
			return "", 0, false
		}
	}
	return "", 0, false
}

// jsonNumberLen is the length of the JSON number at the start of b, or 0 if there is none:
// -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func jsonNumberLen(b []byte) int {
	i := 0
	digits := func() int {
		n := 0
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
			n++
		}
		return n
	}
	if i < len(b) && b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case digits() == 0:
		return 0
	}
	if i < len(b) && b[i] == '.' {
		i++
		if digits() == 0 {
			return 0
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if digits() == 0 {
			return 0
		}
	}
	return i
}
