package policy

import "testing"

func TestSourceEntry(t *testing.T) {
	identity := &Source{Key: "client", Kind: SourceIdentity, Mask: MaskSubnet, Waterfall: []IdentityStep{
		{Tier: TierJWTSubject, Claim: "sub"},
		{Tier: TierAPIKey, Header: "x-api-key"},
		{Tier: TierTLSFingerprint, Header: "x-ja4"},
		{Tier: TierSubnet},
	}}
	tests := []struct {
		src  *Source
		req  Request
		want string
		ok   bool
	}{
		{&Source{Kind: SourceHeader, Header: "x-tenant-id"}, Request{Headers: map[string]string{"x-tenant-id": "shopify"}}, "shopify", true},
		{&Source{Kind: SourceHeader, Header: "x-tenant-id"}, Request{}, "", false},
		{&Source{Kind: SourceHeader, Header: ":path"}, Request{Path: "/v1/orders?x=1"}, "/v1/orders?x=1", true},
		{&Source{Kind: SourceJWTClaim, Claim: "plan"}, Request{Claims: map[string]string{"plan": "pro"}}, "pro", true},
		{&Source{Kind: SourceJWTClaim, Claim: "plan"}, Request{}, "", false},
		{&Source{Kind: SourceRemoteAddress, Mask: MaskNone}, Request{RemoteAddr: "203.0.113.77"}, "203.0.113.77", true},
		{&Source{Kind: SourceRemoteAddress, Mask: MaskNone}, Request{RemoteAddr: "203.0.113.77:5555"}, "203.0.113.77", true},
		{&Source{Kind: SourceRemoteAddress, Mask: MaskSubnet}, Request{RemoteAddr: "203.0.113.77"}, "203.0.113.0/24", true},
		{&Source{Kind: SourceRemoteAddress, Mask: MaskSubnet}, Request{RemoteAddr: "::ffff:203.0.113.77"}, "203.0.113.0/24", true},
		{&Source{Kind: SourceRemoteAddress, Mask: MaskSubnet}, Request{RemoteAddr: "2001:db8:1:2:3:4:5:6"}, "2001:db8:1:2::/64", true},
		{&Source{Kind: SourceRemoteAddress, Mask: MaskSubnet}, Request{RemoteAddr: "[2001:db8:1:2::9]:443"}, "2001:db8:1:2::/64", true},
		{&Source{Kind: SourceRemoteAddress}, Request{RemoteAddr: "not an address"}, "", false},
		{&Source{Kind: SourceGenericKey, Value: "global"}, Request{}, "global", true},
		{&Source{Kind: SourcePathMatch, Value: "pay", PathPrefix: "/v1/payments/"}, Request{Path: "/v1/payments/charge"}, "pay", true},
		{&Source{Kind: SourcePathMatch, Value: "pay", PathExact: "/v1/payments"}, Request{Path: "/v1/payments/charge"}, "", false},
		{identity, Request{Claims: map[string]string{"sub": "u1"}, Headers: map[string]string{"x-api-key": "k"}}, "jwt_subject:u1", true},
		{identity, Request{Headers: map[string]string{"x-api-key": "k", "x-ja4": "t13d"}}, "api_key:k", true},
		{identity, Request{Headers: map[string]string{"x-ja4": "t13d"}, RemoteAddr: "198.51.100.9"}, "tls_fingerprint:t13d", true},
		{identity, Request{RemoteAddr: "198.51.100.9"}, "subnet:198.51.100.0/24", true},
		{identity, Request{}, "", false},
	}
	for i, tt := range tests {
		tt.src.Key = "k"
		got, ok := tt.src.Entry(tt.req)
		if ok != tt.ok || (ok && got != (Entry{"k", tt.want})) {
			t.Errorf("step %d: %s source: got %+v, %v; want %q, %v", i, tt.src.Kind, got, ok, tt.want, tt.ok)
		}
	}
}
