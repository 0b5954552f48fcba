package traffic

import (
	"encoding/base64"
	"fmt"
)

// Tenants are the tenant IDs the generated traffic uses, most active first: the example policies
// name several of them. Tenant volumes follow a Zipf distribution over this list.
var Tenants = func() []string {
	named := []string{"acme", "shopify", "bigcorp", "globex", "initech", "umbrella", "hooli", "stark", "wayne", "tyrell"}
	for i := len(named); i < 200; i++ {
		named = append(named, fmt.Sprintf("tenant-%03d", i))
	}
	return named
}()

// The populations' fixed identities, exported so tests and docs can refer to them.
const (
	IntegrationTenant = "bigcorp"
	IntegrationAPIKey = "ak_live_bigcorp_erp_sync"
	IntegrationIP     = "198.51.100.50"
	IntegrationSub    = "bigcorp-erp" // marked legitimate in the example policies
	OfficeTenant      = "globex"
	OfficeNATIP       = "198.51.100.23"
	OfficeUsers       = 2000
	BotSubnet         = "192.0.2." // the bot rotates inside 192.0.2.0/24
	BotJA4            = "t13d190900_9dc949149365_97f8aa674fd9"
	DashboardCalls    = 25
)

type actor uint8

const (
	actTenantAPI actor = iota
	actIntegration
	actDashboard
	actOffice
	actBot
	actMobile
	actAnon
	actPayments
	numActors
)

// burst is one dashboard page load whose calls share a user.
type burst struct {
	tenant, sub, ip, ja4 string
}

var (
	browserJA4 = []string{
		"t13d1516h2_8daaf6152771_02713d6af862", // Chrome
		"t13d1715h2_5b57614c22b0_3d5424432f57", // Firefox
		"t13d2014h2_a09f3c656075_14788d8d241b", // Safari
		"t13d1516h2_8daaf6152771_e5627efa2ab1", // Edge
	}
	mobileJA4 = []string{"t13d2014h2_a09f3c656075_b0e8c0b3b3b7", "t13d1715h2_5b57614c22b0_7121afd63204"}
	browserUA = []string{
		"Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/124.0 Safari/537.36",
		"Mozilla/5.0 (Macintosh; Intel Mac OS X 14_4) Gecko/20100101 Firefox/125.0",
		"Mozilla/5.0 (Macintosh; Intel Mac OS X 14_4) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.4 Safari/605.1.15",
	}
	apiPaths = []string{"/v1/orders", "/v1/orders/%d", "/catalog/items", "/catalog/items/%d", "/catalog/search?q=%d", "/v1/customers/%d"}
)

// nextTime returns the time of the actor's next request after t.
func (g *generator) nextTime(a actor, t int64) int64 {
	switch a {
	case actTenantAPI:
		return t + g.exp(2)
	case actIntegration:
		return t + 3 // a steady ~333 requests per second
	case actDashboard:
		return t + g.exp(150)
	case actOffice:
		return t + g.exp(6)
	case actBot:
		// Active the first minute of every three, fast while active.
		const period, active = 180_000, 60_000
		next := t + g.exp(2)
		if next%period >= active {
			next = next - next%period + period
		}
		return next
	case actMobile:
		return t + g.exp(5)
	case actAnon:
		return t + g.exp(8)
	default: // actPayments
		return t + g.exp(25)
	}
}

func (g *generator) fill(e event, r *Request) {
	r.Method, r.Authority, r.Protocol = "GET", "api.example.com", "HTTP/1.1"
	switch e.actor {
	case actTenantAPI:
		ti := int(g.zipf.Uint64())
		r.Tenant = Tenants[ti]
		r.APIKey = fmt.Sprintf("ak_live_%s_%d", r.Tenant, g.rng.IntN(50))
		r.ClientIP = tenantIP(ti)
		// Developer clients carry a JWT with their plan but no subject, so the identity
		// waterfall falls through to the API key.
		r.Authorization = bearer("", r.Tenant, tenantPlan(ti))
		r.Path = g.apiPath()
		r.UserAgent = r.Tenant + "-client/1.4"
		r.Protocol = "HTTP/2"
	case actIntegration:
		r.Tenant, r.APIKey, r.ClientIP = IntegrationTenant, IntegrationAPIKey, IntegrationIP
		r.Authorization = bearer(IntegrationSub, IntegrationTenant, "enterprise")
		r.Method, r.Path, r.UserAgent = "POST", "/v1/orders", "bigcorp-erp-sync/7.2"
		r.Protocol = "HTTP/2"
	case actDashboard:
		if e.burst == nil {
			ti := int(g.zipf.Uint64())
			b := &burst{
				tenant: Tenants[ti],
				sub:    fmt.Sprintf("user-%s-%d", Tenants[ti], g.rng.IntN(50)),
				ip:     fmt.Sprintf("%d.%d.%d.%d", 81+g.rng.IntN(15), g.rng.IntN(256), g.rng.IntN(256), 1+g.rng.IntN(254)),
				ja4:    browserJA4[g.rng.IntN(len(browserJA4))],
			}
			// This event is the first call; schedule the other 24 within 40ms.
			for i := 1; i < DashboardCalls; i++ {
				g.schedule(event{t: e.t + int64(g.rng.IntN(40)), actor: actDashboard, burst: b})
			}
			e.burst = b
		}
		b := e.burst
		r.Tenant, r.ClientIP, r.JA4 = b.tenant, b.ip, b.ja4
		r.Authorization = bearer(b.sub, b.tenant, "team")
		r.Path = fmt.Sprintf("/v1/dashboard/widgets/%d", g.rng.IntN(DashboardCalls))
		r.UserAgent = browserUA[0]
		r.Protocol = "HTTP/2"
	case actOffice:
		sub := fmt.Sprintf("corp-u%04d", g.rng.IntN(OfficeUsers))
		r.Tenant, r.ClientIP = OfficeTenant, OfficeNATIP
		r.Authorization = bearer(sub, OfficeTenant, "enterprise")
		r.JA4 = browserJA4[g.rng.IntN(len(browserJA4))]
		r.Path = g.apiPath()
		r.UserAgent = browserUA[g.rng.IntN(len(browserUA))]
	case actBot:
		r.ClientIP = fmt.Sprintf("%s%d", BotSubnet, 1+g.rng.IntN(254))
		r.JA4 = BotJA4
		r.Path = fmt.Sprintf("/catalog/items?page=%d", g.rng.IntN(5000))
		r.UserAgent = "python-requests/2.31.0"
	case actMobile:
		// 300 CGNAT addresses in four /24s, shared by many subscribers.
		n := g.rng.IntN(300)
		r.ClientIP = fmt.Sprintf("100.64.%d.%d", n%4, 1+n/4)
		if g.rng.IntN(10) < 6 {
			ti := int(g.zipf.Uint64())
			r.Tenant = Tenants[ti]
			r.Authorization = bearer(fmt.Sprintf("m-%05d", g.rng.IntN(20000)), r.Tenant, "team")
		}
		// The app's HTTP stack sends no fingerprint header on older versions: those
		// anonymous users fall through to the subnet tier.
		if g.rng.IntN(2) == 0 {
			r.JA4 = mobileJA4[g.rng.IntN(len(mobileJA4))]
		}
		r.Path = g.apiPath()
		r.UserAgent = "ExampleApp/5.2 (iPhone; iOS 17.4)"
		r.Protocol = "HTTP/2"
	case actAnon:
		r.ClientIP = fmt.Sprintf("%d.%d.%d.%d", 24+g.rng.IntN(60), g.rng.IntN(256), g.rng.IntN(256), 1+g.rng.IntN(254))
		r.JA4 = browserJA4[g.rng.IntN(len(browserJA4))]
		r.Path = fmt.Sprintf("/catalog/items/%d", g.rng.IntN(100000))
		r.UserAgent = browserUA[g.rng.IntN(len(browserUA))]
	case actPayments:
		ti := int(g.zipf.Uint64())
		r.Tenant = Tenants[ti]
		r.APIKey = fmt.Sprintf("ak_live_%s_billing", r.Tenant)
		r.ClientIP = tenantIP(ti)
		r.Method, r.Path = "POST", "/v1/payments/charge"
		r.UserAgent = r.Tenant + "-billing/2.0"
		r.Protocol = "HTTP/2"
	}
	if r.Method == "POST" {
		r.BytesReceived = 300 + g.rng.IntN(1200)
	}
}

func (g *generator) apiPath() string {
	p := apiPaths[g.rng.IntN(len(apiPaths))]
	for i := 0; i < len(p); i++ {
		if p[i] == '%' {
			return fmt.Sprintf(p, g.rng.IntN(100000))
		}
	}
	return p
}

// tenantIP is the address of tenant i's servers.
func tenantIP(i int) string {
	return fmt.Sprintf("34.%d.%d.%d", 100+i/250, (i*7)%256, 10+i%240)
}

// tenantPlan is the plan of tenant i: the example policies' developer_free, developer_pro and
// enterprise tiers in turn.
func tenantPlan(i int) string {
	return [...]string{"developer_free", "developer_pro", "enterprise"}[i%3]
}

const jwtHeader = "eyJhbGciOiJSUzI1NiIsInR5cCI6IkpXVCJ9" // {"alg":"RS256","typ":"JWT"}

// bearer returns an Authorization value carrying a JWT with the given claims (sub omitted when
// empty). Its signature is a placeholder: the simulator decodes claims without verifying them.
func bearer(sub, tenant, plan string) string {
	payload := fmt.Sprintf(`{"tenant":%q,"plan":%q,"iss":"https://auth.example.com"}`, tenant, plan)
	if sub != "" {
		payload = fmt.Sprintf(`{"sub":%q,"tenant":%q,"plan":%q,"iss":"https://auth.example.com"}`, sub, tenant, plan)
	}
	return "Bearer " + jwtHeader + "." + base64.RawURLEncoding.EncodeToString([]byte(payload)) + ".c2lnbmF0dXJlLW5vdC12ZXJpZmllZA"
}
