package report

import "fmt"

// Term is one column or figure of the reports and what it means, for the legend every format
// shows. Name is the column's heading as the table and HTML write it.
type Term struct {
	Name, Meaning string
}

// Legend returns what the rule columns of r's reports mean, in the order of the table's
// columns. Every format shows it: one source, so that they cannot explain a column differently.
func Legend(r *Report) []Term {
	return []Term{
		{"Would deny", "over the rule's limit, at any stage (shadow and soft rules count these but admit them)"},
		{"Denied", "would-deny decisions rejected at the rule's stage: enforce, and canary on its share of gateways"},
		{"Ideal", "what one global bucket per key, without leasing or store latency, would deny"},
		{"Over", "over-admission: admitted by the leased gateways, denied by the ideal bucket"},
		{"Under", "under-admission: denied by the leased gateways (tokens stranded elsewhere), admitted by the ideal bucket"},
		{"Stranded max", "the most tokens leased to gateways and not yet spent at one time, summed over gateways"},
		{"Lease max", "the largest batch of tokens one store call granted a gateway"},
		{"False pos", "false positives: Legit plus NAT"},
		{"Legit", "would-deny decisions on identities marked legitimate (a rule's legit list, --legit)"},
		{"NAT", fmt.Sprintf("shared-NAT collateral: would-deny decisions on an address or subnet with %d or more users behind it", r.Settings.NATUsers)},
	}
}

// meaning returns what the legend says of name, or "".
func meaning(legend []Term, name string) string {
	for _, t := range legend {
		if t.Name == name {
			return t.Meaning
		}
	}
	return ""
}

// chartTerms are the HTML report's charts and what they show, for their tooltips and legend.
var chartTerms = []Term{
	{"Requests and denials per second", "a rule's requests, would-deny decisions and ideal-bucket denials per second, " +
		"averaged over each time bucket. Ideal deny is a wide pale band under the would-deny line: where leasing denies " +
		"just as the ideal bucket would, the red line runs inside the band."},
	{"Largest lease batch", "the largest batch of tokens one store call granted a gateway in each time bucket " +
		"(Lease max over time): larger batches mean fewer store calls, and more tokens that can be stranded."},
}

// chartTips are the charts' tooltips, in chartTerms's order.
var chartTips = []string{chartTerms[0].Meaning, chartTerms[1].Meaning}
