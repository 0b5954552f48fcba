package simulate

import "encoding/base64"

func b64(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }

// see records user behind addr, as the shards do.
func (n *natTracker) see(addr, user string) { n.seeHash(addrHash(addr), userHash(user)) }

// countOf counts the users behind addr.
func (n *natTracker) countOf(addr string) (int, bool) { return n.count(addrHash(addr)) }
