// Package apiconn tunes how the gateway's and the agent's API clients notice a dead connection.
package apiconn

import "os"

// DeadConnectionsFaster makes client-go notice a dead HTTP/2 connection to the API server in
// 15 s instead of 45 s (no frame for 10 s, then a ping unanswered for 5 s), unless the
// environment already sets HTTP2_READ_IDLE_TIMEOUT_SECONDS or HTTP2_PING_TIMEOUT_SECONDS. After
// an API server restart a connection that nothing closed would otherwise hold a process's
// watches for 45 s, and the data plane follows them. Call it before any client is made.
func DeadConnectionsFaster() {
	for k, v := range map[string]string{"HTTP2_READ_IDLE_TIMEOUT_SECONDS": "10", "HTTP2_PING_TIMEOUT_SECONDS": "5"} {
		if _, set := os.LookupEnv(k); !set {
			_ = os.Setenv(k, v)
		}
	}
}
