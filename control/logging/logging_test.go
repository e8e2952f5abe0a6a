package logging_test

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/skein-net/skein/control/logging"
)

func TestNew(t *testing.T) {
	var b bytes.Buffer
	log, err := logging.New(&b, "warn", "json")
	if err != nil {
		t.Fatal(err)
	}
	log.Info("hidden")
	log.Warn("shown", "peer", "b")
	var rec map[string]any
	if err := json.Unmarshal(b.Bytes(), &rec); err != nil || rec["msg"] != "shown" || rec["peer"] != "b" {
		t.Errorf("json log %q: %v", b.String(), err)
	}
	b.Reset()
	log, _ = logging.New(&b, "info", "text")
	log.Info("hello", "k", "v")
	if !strings.Contains(b.String(), "msg=hello k=v") {
		t.Errorf("text log %q", b.String())
	}
	for _, bad := range [][2]string{{"loud", "text"}, {"info", "xml"}} {
		if _, err := logging.New(&b, bad[0], bad[1]); err == nil {
			t.Errorf("level %q format %q accepted", bad[0], bad[1])
		}
	}
}
