package traffic

import "strconv"

// AppendIstioJSON appends r as one line of Istio's JSON access log: meshConfig
// accessLogEncoding JSON with Istio's default format, to which the platform team has added the
// gateway node ("hostname": %HOSTNAME%) and the request headers the policies read
// (authorization, x-api-key, x-ja4, x-tenant-id, each %REQ(...)%). Envoy writes such a
// format's keys sorted, its numeric operators as numbers and an operator without a value as
// null, so this line does too. It reads into the same accesslog.Record as r's AppendJSON line.
//
// The values a Request does not hold are derived from it without randomness, so that every
// format writes the same requests: the gateway pod's address from the gateway's name, the
// upstream cluster from the path's service, the upstream service time from the duration.
func (r *Request) AppendIstioJSON(b []byte) []byte {
	b = append(b, `{"authority":`...)
	b = appendNullable(b, r.Authority)
	b = appendKey(b, "authorization")
	b = appendNullable(b, r.Authorization)
	b = appendKey(b, "bytes_received")
	b = strconv.AppendInt(b, int64(r.BytesReceived), 10)
	b = appendKey(b, "bytes_sent")
	b = strconv.AppendInt(b, int64(r.BytesSent), 10)
	b = append(b, `,"connection_termination_details":null`...)
	b = appendKey(b, "downstream_local_address")
	b = append(b, '"')
	b = appendPodIP(b, r.Gateway)
	b = append(b, `:8443"`...) // the ingress gateway's HTTPS listener
	b = appendKey(b, "downstream_remote_address")
	b = append(b, '"')
	b = append(b, r.ClientIP...)
	b = append(b, ':')
	b = strconv.AppendInt(b, int64(r.remotePort()), 10)
	b = append(b, '"')
	b = appendKey(b, "duration")
	b = strconv.AppendInt(b, int64(r.Duration), 10)
	b = appendKey(b, "hostname")
	b = appendNullable(b, r.Gateway)
	b = appendKey(b, "method")
	b = appendNullable(b, r.Method)
	b = appendKey(b, "path")
	b = appendNullable(b, r.Path)
	b = appendKey(b, "protocol")
	b = appendNullable(b, r.Protocol)
	b = appendKey(b, "request_id")
	b = appendNullable(b, r.RequestID)
	b = appendKey(b, "requested_server_name")
	b = appendNullable(b, r.Authority) // the gateway terminates TLS for the API's host name
	b = appendKey(b, "response_code")
	b = strconv.AppendInt(b, int64(r.Status), 10)
	b = append(b, `,"response_code_details":"via_upstream","response_flags":"-","route_name":"default"`...)
	b = appendKey(b, "start_time")
	b = append(b, '"')
	b = appendTime(b, r.TimeMs)
	b = append(b, '"')
	b = appendKey(b, "upstream_cluster")
	b = append(b, `"outbound|8080||`...)
	b = append(b, service(r.Path)...)
	b = append(b, `.default.svc.cluster.local"`...)
	b = appendKey(b, "upstream_host")
	b = appendNullable(b, r.Upstream)
	b = appendKey(b, "upstream_local_address")
	b = append(b, '"')
	b = appendPodIP(b, r.Gateway)
	b = append(b, ':')
	b = strconv.AppendInt(b, int64(r.upstreamPort()), 10)
	b = append(b, '"')
	b = appendKey(b, "upstream_service_time")
	b = append(b, '"') // a response header's value, so a string
	b = strconv.AppendInt(b, int64(max(r.Duration-1, 0)), 10)
	b = append(b, `","upstream_transport_failure_reason":null`...)
	b = appendKey(b, "user_agent")
	b = appendNullable(b, r.UserAgent)
	b = appendKey(b, "x-api-key")
	b = appendNullable(b, r.APIKey)
	b = appendKey(b, "x-ja4")
	b = appendNullable(b, r.JA4)
	b = appendKey(b, "x-tenant-id")
	b = appendNullable(b, r.Tenant)
	b = appendKey(b, "x_forwarded_for")
	b = appendNullable(b, r.ClientIP)
	return append(b, "}\n"...)
}

// appendKey appends ,"key": for the value that follows.
func appendKey(b []byte, key string) []byte {
	b = append(b, ',', '"')
	b = append(b, key...)
	return append(b, '"', ':')
}

// appendNullable appends value as a JSON string, or null when it is empty, as Envoy writes an
// operator without a value in a JSON format.
func appendNullable(b []byte, value string) []byte {
	if value == "" {
		return append(b, "null"...)
	}
	return appendString(b, value)
}

// appendPodIP appends the address of the gateway pod that logs as gateway, 10.244.x.y: the same
// for every line of the gateway.
func appendPodIP(b []byte, gateway string) []byte {
	h := uint32(2166136261) // FNV-1a
	for i := 0; i < len(gateway); i++ {
		h = (h ^ uint32(gateway[i])) * 16777619
	}
	b = append(b, "10.244."...)
	b = strconv.AppendUint(b, uint64(h>>8%4), 10)
	b = append(b, '.')
	return strconv.AppendUint(b, uint64(2+h%250), 10)
}

// upstreamPort is the gateway's ephemeral port for its connection to the upstream, in Linux's
// default range 32768-60999.
func (r *Request) upstreamPort() int {
	return 32768 + int((uint64(r.TimeMs)*2654435761+uint64(r.BytesSent))%28232)
}

// service is the Kubernetes service that serves path: its first segment after an API version
// (/v1/orders/7 is orders, /catalog/items is catalog).
func service(path string) string {
	p := path
	if len(p) > 0 && p[0] == '/' {
		p = p[1:]
	}
	if len(p) > 3 && p[:3] == "v1/" {
		p = p[3:]
	}
	for i := 0; i < len(p); i++ {
		if p[i] == '/' || p[i] == '?' {
			p = p[:i]
			break
		}
	}
	if p == "" {
		return "web"
	}
	return p
}
