package download_test

import (
	"fmt"
	"net/http"
	"testing"

	"github.com/ferry-io/ferry/internal/testenv"
	"github.com/ferry-io/ferry/models"
)

// Through ferry's router on a plain TCP listener, a 200 and a single-range
// 206 of at least 4 MiB go from the store's connection to the client's
// inside the kernel:
// ferry_download_spliced_bytes_total counts all of their bytes but those
// read with the store's answer header, the bodies are the object's, and
// the access log and ferry_download_bytes_total count every byte sent,
// though gin's writer saw few of them. A small range and a multipart
// answer are copied.
func TestSplicedDownloads(t *testing.T) {
	e := newEnv(t, testenv.NewDB(t, models.SQLite))
	owner, _ := e.user("alice")
	data := randomData(t, 12<<20)
	e.put("exp_big", owner, data, "big.gz")
	const headerRead = 16 << 10 // what the store's answer header read may buffer

	for _, c := range []struct {
		name      string
		hdr       []string
		w         want
		sent      int64
		spliceMin int64 // at least this many spliced; 0 means none
	}{
		{"whole", nil, want{status: 200}, 12 << 20, 12<<20 - headerRead},
		{"one range", []string{"Range", "bytes=1000-9000999"}, want{status: 206, contentRange: fmt.Sprintf("bytes 1000-9000999/%d", 12<<20), spans: [][2]int64{{1000, 9000999}}}, 9000000, 9000000 - headerRead},
		{"small range", []string{"Range", "bytes=0-99"}, want{status: 206, contentRange: fmt.Sprintf("bytes 0-99/%d", 12<<20), spans: [][2]int64{{0, 99}}}, 100, 0},
		{"two ranges", []string{"Range", "bytes=0-99,5000000-5999999"}, want{status: 206, spans: [][2]int64{{0, 99}, {5000000, 5999999}}}, -1, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			spliced := testenv.Counter(t, e.reg, "ferry_download_spliced_bytes_total")
			sent := testenv.Counter(t, e.reg, "ferry_download_bytes_total")
			line := e.logs.accessLines()
			r := do(t, http.MethodGet, e.link(e.svc, e.srv, "exp_big", owner), c.hdr...)
			check(t, r, data, c.w)
			spliced = testenv.Counter(t, e.reg, "ferry_download_spliced_bytes_total") - spliced
			sent = testenv.Counter(t, e.reg, "ferry_download_bytes_total") - sent
			if c.spliceMin == 0 && spliced != 0 || c.spliceMin > 0 && (spliced < float64(c.spliceMin) || spliced > sent) {
				t.Fatalf("%.0f bytes spliced of %.0f sent, want at least %d", spliced, sent, c.spliceMin)
			}
			if c.sent < 0 {
				return // a multipart body's size is its parts' and their headers'
			}
			if sent != float64(c.sent) {
				t.Fatalf("ferry_download_bytes_total grew by %.0f, want %d", sent, c.sent)
			}
			if got, ok := e.logs.accessBytes(line); !ok || got != c.sent {
				t.Fatalf("the access log says %d bytes (a line: %v), want %d", got, ok, c.sent)
			}
		})
	}
}
