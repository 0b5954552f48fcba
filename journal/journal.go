// Package journal owns the enforcer's decision journal: a compact, line-oriented record of every
// rate-limit decision and every store reply a process made, in order, so that a replay through
// the engine reproduces that process's decisions exactly. The enforcer writes it (Writer);
// Replay re-runs it and reports every decision that comes out differently; tests read it
// (Reader).
//
// # Format
//
// A journal is UTF-8 text, one JSON object per line (JSON Lines). The first line is the header:
//
//	{"journal":"rlctl","v":2,"instance":"pod-a","start_ms":1767225600000,"stripes":64,"unavailable_retry_ms":1000}
//
// stripes is the number of lease stripes the enforcer ordered its records by (see Order) and
// unavailable_retry_ms the retry-after it answers while its store is unavailable.
//
// Every following line is one Record. Its "k" field says which kind it is; fields that are zero
// for a kind are omitted. Times are integer milliseconds on the engine's clock (the clock the
// decision used), never floating point.
//
// A decision ("k":"d"), one per descriptor of a ShouldRateLimit call:
//
//		{"k":"d","t":1767225600123,"seq":17,"gen":1,"dom":"edge","rule":"bigcorp-orders",
//		 "key":"rl:edge:bigcorp-orders:tenant:bigcorp","cost":1,"eng":"ok","code":"ok","via":"lease",
//		 "rem":412,"reset":2}
//
//	  - seq numbers the ShouldRateLimit call (descriptors of one call share it; "i" is the
//	    descriptor's index in the call, omitted when 0); gen is the generation of the config
//	    record whose snapshot decided it.
//	  - eng is the engine's verdict for the key ("ok" or "over"), code the answer given after the
//	    rule's stage and failure mode ("ok" or "over"); they differ in shadow and soft stages and in
//	    canary off the canary share.
//	  - via says where the verdict came from: "lease" (local leased tokens), "store" (a synchronous
//	    store take), "short_circuit" (the key is locally blocked until its retry-after instant),
//	    "fallback" (the store is unavailable and the rule's local fallback bucket decided),
//	    "fail_open" (store unavailable, no fallback bucket: admitted), "fail_closed" (store
//	    unavailable: denied), "unmatched" (no rule; the call is OK with no limit).
//	  - stage is the rule's stage when it is not "enforce"; rem and reset are the remaining tokens
//	    and the milliseconds until the tightest limit is full again or its window ends (until
//	    retry, when over).
//	  - ovr_req and ovr_ms are the descriptor's limit override, when it has one.
//
// A store reply ("k":"s"), one per call the enforcer made to its store:
//
//		{"k":"s","t":1767225600120,"lt":1767225600121,"op":"take","key":"rl:edge:bigcorp-orders:tenant:bigcorp",
//		 "want":500,"min":1,"got":500,"rem":9500,"retry":0,"us":143,"async":true}
//
//	  - op is "take" (lease or synchronous take) or "return" (unspent tokens handed back).
//	  - t is the store's time (Redis TIME) when it reported one, lt the engine time at which the
//	    enforcer applied the reply; async marks a prefetch, whose reply lands outside any
//	    decision, as opposed to a take made synchronously by the next decision on its key.
//	  - want and min are the requested batch and the least acceptable grant, got what the store
//	    granted, rem what the key held afterwards, retry the store's retry-after in ms when it
//	    granted nothing, reset its time until the key is full, us the call's latency in
//	    microseconds, and err the error text when the call failed (timeout, refused connection,
//	    circuit open).
//
// A configuration change ("k":"c") records the snapshot version (policy.ContentHash, what rlctl
// render writes as content_hash) of the decisions whose gen is its gen:
//
//	{"k":"c","t":1767225600000,"gen":1,"ver":"sha256:9f2c…","rules":42}
//
// A sweep ("k":"w") records that the enforcer gave back expired leases of one stripe and forgot
// idle ones, at engine time t:
//
//	{"k":"w","t":1767225601000,"stripe":17}
//
// The end ("k":"e") is the last line of a journal whose enforcer shut down gracefully, after
// it returned every lease; dropped is the number of records the journal lost (see Drop):
//
//	{"k":"e","t":1767225900000}
//
// Readers must ignore fields they do not know; new fields may be added without changing "v".
// A change that alters the meaning of an existing field, or adds a kind, increments "v".
// Version 2 added gen, ovr_req, ovr_ms, lt, async, the "w" and "e" kinds and the header's
// stripes and unavailable_retry_ms, and orders records as Order describes.
//
// # Order
//
// A version 2 journal lists the records of each key in the order in which they changed the
// key's lease state, and every engine time it carries is the only time the engine read while
// making that change. The enforcer gets there by splitting keys over the header's number of
// stripes (engine.ShardOf of the key) and writing each record inside a critical section of its
// key's stripe: a decision with its synchronous store take, a prefetch's reply with its credit,
// a sweep. Replay therefore follows the journal's order and reproduces each decision exactly.
package journal

// Version is the journal format version written in the header's "v" field.
const Version = 2

// Kind says what a Record describes.
type Kind byte

// The record kinds, as written in the "k" field.
const (
	KindDecision Kind = 'd'
	KindStore    Kind = 's'
	KindConfig   Kind = 'c'
	KindSweep    Kind = 'w'
	KindEnd      Kind = 'e'
)

// String returns the kind's one-letter wire name.
func (k Kind) String() string { return string(rune(k)) }

// Header is the first line of a journal.
type Header struct {
	Journal  string `json:"journal"` // always "rlctl"
	Version  int    `json:"v"`
	Instance string `json:"instance,omitempty"`
	StartMs  int64  `json:"start_ms"`
	// Stripes is the number of lease stripes that order the records (see Order); 0 in a
	// version 1 journal, whose order is not exact.
	Stripes int `json:"stripes,omitempty"`
	// UnavailableRetryMs is the retry-after of a denial while the store is unavailable.
	UnavailableRetryMs int64 `json:"unavailable_retry_ms,omitempty"`
}

// Record is one line of a journal after the header. Which fields are meaningful depends on Kind;
// see the package documentation.
type Record struct {
	Kind   Kind  `json:"-"`
	TimeMs int64 `json:"t"`

	// Decision fields.
	Seq       uint64 `json:"seq,omitempty"`
	Index     int    `json:"i,omitempty"`
	Gen       int    `json:"gen,omitempty"` // and config
	Domain    string `json:"dom,omitempty"`
	Rule      string `json:"rule,omitempty"`
	Stage     string `json:"stage,omitempty"`
	Cost      int64  `json:"cost,omitempty"`
	Engine    string `json:"eng,omitempty"`
	Code      string `json:"code,omitempty"`
	Via       string `json:"via,omitempty"`
	ResetMs   int64  `json:"reset,omitempty"`
	Remaining int64  `json:"rem,omitempty"`
	// OverrideRequests and OverrideMs are a descriptor's limit override.
	OverrideRequests int64 `json:"ovr_req,omitempty"`
	OverrideMs       int64 `json:"ovr_ms,omitempty"`

	// Decision and store fields.
	Key string `json:"key,omitempty"`

	// Store fields.
	LocalMs   int64  `json:"lt,omitempty"`
	Async     bool   `json:"async,omitempty"`
	Op        string `json:"op,omitempty"`
	Want      int64  `json:"want,omitempty"`
	Min       int64  `json:"min,omitempty"`
	Got       int64  `json:"got,omitempty"`
	RetryMs   int64  `json:"retry,omitempty"`
	LatencyUs int64  `json:"us,omitempty"`
	Err       string `json:"err,omitempty"`

	// Config fields.
	ConfigVersion string `json:"ver,omitempty"`
	Rules         int    `json:"rules,omitempty"`

	// Sweep fields.
	Stripe int `json:"stripe,omitempty"`

	// End fields.
	Dropped uint64 `json:"dropped,omitempty"`
}

// Values of Record.Engine and Record.Code.
const (
	CodeOK   = "ok"
	CodeOver = "over"
)

// Values of Record.Via.
const (
	ViaLease        = "lease"
	ViaStore        = "store"
	ViaShortCircuit = "short_circuit"
	ViaFallback     = "fallback"
	ViaFailOpen     = "fail_open"
	ViaFailClosed   = "fail_closed"
	ViaUnmatched    = "unmatched"
)

// Values of Record.Op.
const (
	OpTake   = "take"
	OpReturn = "return"
)
