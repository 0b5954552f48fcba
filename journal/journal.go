// Package journal owns the enforcer's decision journal: a compact, line-oriented record of every
// rate-limit decision and every store reply a process made, in order, so that a replay through
// the engine can reproduce that process's decisions exactly. The enforcer writes it (Writer);
// simulate and tests read it (Reader).
//
// # Format
//
// A journal is UTF-8 text, one JSON object per line (JSON Lines). The first line is the header:
//
//	{"journal":"rlctl","v":1,"instance":"pod-a","start_ms":1767225600000}
//
// Every following line is one Record. Its "k" field says which kind it is; fields that are zero
// for a kind are omitted. Times are integer milliseconds on the engine's clock (the clock the
// decision used), never floating point.
//
// A decision ("k":"d"), one per descriptor of a ShouldRateLimit call:
//
//		{"k":"d","t":1767225600123,"seq":17,"dom":"edge","rule":"bigcorp-orders","key":"edge|tenant=bigcorp",
//		 "cost":1,"eng":"ok","code":"ok","via":"lease","rem":412,"reset":2}
//
//	  - seq numbers the ShouldRateLimit call (descriptors of one call share it; "i" is the
//	    descriptor's index in the call, omitted when 0).
//	  - eng is the engine's verdict for the key ("ok" or "over"), code the answer given after the
//	    rule's stage and failure mode ("ok" or "over"); they differ in shadow and soft stages and in
//	    canary off the canary share.
//	  - via says where the verdict came from: "lease" (local leased tokens), "store" (a synchronous
//	    store take), "short_circuit" (the key is locally blocked until its retry-after instant),
//	    "fallback" (the store is unavailable and the rule's local fallback bucket decided),
//	    "fail_open" (store unavailable, no fallback bucket: admitted), "fail_closed" (store
//	    unavailable: denied), "unmatched" (no rule; the call is OK with no limit).
//	  - stage is the rule's stage when it is not "enforce"; rem and reset are the remaining tokens
//	    and the milliseconds until the limit is full again (or until retry, when over).
//
// A store reply ("k":"s"), one per call the enforcer made to its store:
//
//		{"k":"s","t":1767225600120,"op":"take","key":"edge|tenant=bigcorp","want":500,"min":1,
//		 "got":500,"rem":9500,"retry":0,"us":143}
//
//	  - op is "take" (lease or synchronous take) or "return" (unspent tokens handed back).
//	  - want and min are the requested batch and the least acceptable grant, got what the store
//	    granted, rem what the key held afterwards, retry the store's retry-after in ms when it
//	    granted nothing, us the call's latency in microseconds, and err the error text when the
//	    call failed (timeout, refused connection, circuit open).
//
// A configuration change ("k":"c") records the snapshot version the following decisions used:
//
//	{"k":"c","t":1767225600000,"ver":"sha256:9f2c…","rules":42}
//
// Readers must ignore fields they do not know; new fields may be added without changing "v".
// A change that alters the meaning of an existing field increments "v".
package journal

// Version is the journal format version written in the header's "v" field.
const Version = 1

// Kind says what a Record describes.
type Kind byte

// The record kinds, as written in the "k" field.
const (
	KindDecision Kind = 'd'
	KindStore    Kind = 's'
	KindConfig   Kind = 'c'
)

// String returns the kind's one-letter wire name.
func (k Kind) String() string { return string(rune(k)) }

// Header is the first line of a journal.
type Header struct {
	Journal  string `json:"journal"` // always "rlctl"
	Version  int    `json:"v"`
	Instance string `json:"instance,omitempty"`
	StartMs  int64  `json:"start_ms"`
}

// Record is one line of a journal after the header. Which fields are meaningful depends on Kind;
// see the package documentation.
type Record struct {
	Kind   Kind  `json:"-"`
	TimeMs int64 `json:"t"`

	// Decision fields.
	Seq       uint64 `json:"seq,omitempty"`
	Index     int    `json:"i,omitempty"`
	Domain    string `json:"dom,omitempty"`
	Rule      string `json:"rule,omitempty"`
	Stage     string `json:"stage,omitempty"`
	Cost      int64  `json:"cost,omitempty"`
	Engine    string `json:"eng,omitempty"`
	Code      string `json:"code,omitempty"`
	Via       string `json:"via,omitempty"`
	ResetMs   int64  `json:"reset,omitempty"`
	Remaining int64  `json:"rem,omitempty"`

	// Decision and store fields.
	Key string `json:"key,omitempty"`

	// Store fields.
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
