package simulate

import "encoding/base64"

func b64(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }

// see records user behind addr, as countUser does.
func (n *natTracker) see(addr, user string) { n.seeHash(addr, userHash(user)) }
