package simulate

import "github.com/rlctl/rlctl/policy"

// An Observer is told of a replay's denials one request at a time, for a caller that compares
// two replays of one log request by request (rlctl diff --log). Set it in Config.Observer. Its
// methods run on the replay goroutine, one call at a time.
type Observer interface {
	// Deny is called for each decision in which a rule would deny a request, at any stage.
	// A request that several rules would deny gives one call per rule.
	Deny(Denial)
	// Finish is called once, when the replay ends, with the number of distinct users seen
	// behind an address or subnet value: report.Identity.Users and UsersCapped as the report
	// counts them, for any Denial.Addr.
	Finish(users func(addr string) (n int, capped bool))
}

// Denial is one decision in which a rule would deny a request.
type Denial struct {
	// File and Line locate the request's record in its log: two replays of the same logs give
	// each record the same File and Line.
	File string
	Line int64
	// Domain and Rule name the rule; Rule is the model's own (Config.Model).
	Domain string
	Rule   *policy.Rule
	// Denied says the rule rejects the request at its stage on the request's gateway; false
	// means shadow or soft.
	Denied bool
	// Identity is the rule's descriptor as reports show it ("tenant_id=acme, path=/v1").
	Identity string
	// Addr is the address or subnet in the descriptor, "" when it has none: the value whose
	// users the shared-NAT check counts.
	Addr string
	// Legit says a descriptor value of the request is marked legitimate.
	Legit bool
}
