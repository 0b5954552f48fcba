package simulate

import (
	"encoding/base64"
	"encoding/json"
	"strconv"
	"strings"

	"github.com/rlctl/rlctl/policy"
	"github.com/rlctl/rlctl/simulate/accesslog"
)

// requestBuilder turns access-log records into policy.Requests, reusing one header map. JWT
// claims are decoded from the Authorization header's bearer token WITHOUT verifying its
// signature: the log records what the gateway saw, and the simulator only needs the claims
// Envoy's jwt_authn filter would have put into dynamic metadata.
type requestBuilder struct {
	headers map[string]string
	claims  map[string]map[string]string // token → claims; bounded
}

const maxCachedTokens = 1 << 16

func newRequestBuilder() *requestBuilder {
	return &requestBuilder{headers: map[string]string{}, claims: map[string]map[string]string{}}
}

// build fills a policy.Request from rec. The request is valid until the next call.
func (b *requestBuilder) build(rec *accesslog.Record) policy.Request {
	clear(b.headers)
	for _, h := range rec.Headers {
		b.headers[h.Name] = h.Value
	}
	if rec.Method != "" {
		b.headers[":method"] = rec.Method
	}
	if rec.Authority != "" {
		b.headers[":authority"] = rec.Authority
	}
	if rec.UserAgent != "" {
		b.headers["user-agent"] = rec.UserAgent
	}
	req := policy.Request{Headers: b.headers, RemoteAddr: rec.ClientIP(), Path: rec.Path}
	if auth := b.headers["authorization"]; auth != "" {
		req.Claims = b.claimsOf(auth)
	}
	return req
}

func (b *requestBuilder) claimsOf(auth string) map[string]string {
	if c, ok := b.claims[auth]; ok {
		return c
	}
	c := DecodeClaims(auth)
	if len(b.claims) >= maxCachedTokens {
		clear(b.claims)
	}
	b.claims[strings.Clone(auth)] = c
	return c
}

// DecodeClaims returns the top-level claims of the JWT in an Authorization header value
// ("Bearer <jwt>" or a bare JWT) as strings, or nil when it holds no decodable JWT. The
// signature is NOT verified. Strings are taken as they are; numbers and booleans are written
// as JSON writes them.
func DecodeClaims(auth string) map[string]string {
	tok := strings.TrimSpace(auth)
	if len(tok) > 7 && strings.EqualFold(tok[:7], "bearer ") {
		tok = strings.TrimSpace(tok[7:])
	}
	parts := strings.Split(tok, ".")
	if len(parts) != 3 {
		return nil
	}
	payload, err := base64.RawURLEncoding.DecodeString(strings.TrimRight(parts[1], "="))
	if err != nil {
		return nil
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(payload, &raw); err != nil {
		return nil
	}
	claims := make(map[string]string, len(raw))
	for k, v := range raw {
		var s string
		if json.Unmarshal(v, &s) == nil {
			claims[k] = s
			continue
		}
		var n json.Number
		if json.Unmarshal(v, &n) == nil {
			claims[k] = n.String()
			continue
		}
		var bv bool
		if json.Unmarshal(v, &bv) == nil {
			claims[k] = strconv.FormatBool(bv)
		}
	}
	return claims
}
