package client

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"hash/crc32"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func TestBackoff(t *testing.T) {
	want := []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 10 * time.Second, 10 * time.Second}
	for i, w := range want {
		if got := Backoff(i + 1); got != w {
			t.Errorf("Backoff(%d) = %s, want %s", i+1, got, w)
		}
	}
}

func TestProblemDecoding(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/problem+json")
		w.WriteHeader(409)
		fmt.Fprint(w, `{"type":"about:blank","title":"Conflict","status":409,"code":"parts_missing","detail":"S3 lacks parts","request_id":"r1","missing_parts":[2,5]}`)
	}))
	defer srv.Close()
	c := New(srv.URL, "t")
	_, err := c.call(context.Background(), "POST", "/x", nil, nil)
	var fe *Error
	if !errors.As(err, &fe) || fe.Status != 409 || fe.Code != "parts_missing" || fe.RequestID != "r1" || !IsCode(err, "parts_missing") {
		t.Fatalf("decoded %#v", err)
	}
	if got := missingParts(fe); len(got) != 2 || got[0] != 2 || got[1] != 5 {
		t.Fatalf("missing parts %v", got)
	}
	if !strings.Contains(err.Error(), "S3 lacks parts") {
		t.Fatalf("message %q lacks the detail", err)
	}
}

// servePeer serves content under a strong SHA-256 ETag with net/http's own
// ServeContent, which honours Range and If-Range like ferry's proxy.
func servePeer(content *atomic.Pointer[[]byte], requests *atomic.Int32) *httptest.Server {
	return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		b := *content.Load()
		sum := sha256.Sum256(b)
		w.Header().Set("ETag", `"`+hex.EncodeToString(sum[:])+`"`)
		w.Header().Set("Content-Type", "application/octet-stream")
		http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(b))
	}))
}

func randomData(n int) []byte {
	b := make([]byte, n)
	rand.Read(b)
	return b
}

// A partial download whose resource changed is never spliced: the server
// answers 200 to the If-Range request and the client starts over.
func TestDownloadRestartsWhenTheResourceChanged(t *testing.T) {
	old, now := randomData(100_000), randomData(120_000)
	var content atomic.Pointer[[]byte]
	content.Store(&old)
	var requests atomic.Int32
	srv := servePeer(&content, &requests)
	defer srv.Close()
	dir := t.TempDir()
	out := filepath.Join(dir, "f")

	// Leave a partial of the old content, as a cut transfer would.
	sum := sha256.Sum256(old)
	os.WriteFile(out+".part", old[:40_000], 0o644)
	writeMeta(out+".part.json", partialMeta{ETag: `"` + hex.EncodeToString(sum[:]) + `"`, Size: int64(len(old))})

	content.Store(&now)
	c := New(srv.URL, "")
	res, err := c.Download(context.Background(), srv.URL+"/x", out, DownloadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(out)
	if !bytes.Equal(got, now) || !res.Restarted || res.ResumedFrom != 0 {
		t.Fatalf("restarted=%v resumedFrom=%d equal=%v", res.Restarted, res.ResumedFrom, bytes.Equal(got, now))
	}
}

// An unchanged resource resumes where the partial ends.
func TestDownloadResumes(t *testing.T) {
	data := randomData(200_000)
	var content atomic.Pointer[[]byte]
	content.Store(&data)
	var requests atomic.Int32
	srv := servePeer(&content, &requests)
	defer srv.Close()
	out := filepath.Join(t.TempDir(), "f")
	sum := sha256.Sum256(data)
	os.WriteFile(out+".part", data[:77_777], 0o644)
	writeMeta(out+".part.json", partialMeta{ETag: `"` + hex.EncodeToString(sum[:]) + `"`, Size: int64(len(data))})
	res, err := New(srv.URL, "").Download(context.Background(), srv.URL+"/x", out, DownloadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(out)
	if !bytes.Equal(got, data) || res.ResumedFrom != 77_777 || res.Restarted || requests.Load() != 1 {
		t.Fatalf("resumedFrom=%d restarted=%v requests=%d", res.ResumedFrom, res.Restarted, requests.Load())
	}
}

// Bytes that do not match the strong ETag's SHA-256 are an error and are
// not left behind as the output.
func TestDownloadChecksSHA256(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("ETag", `"`+strings.Repeat("ab", 32)+`"`)
		w.Write([]byte("not what the etag says"))
	}))
	defer srv.Close()
	out := filepath.Join(t.TempDir(), "f")
	_, err := New(srv.URL, "").Download(context.Background(), srv.URL+"/x", out, DownloadOptions{})
	if !errors.Is(err, ErrChecksum) {
		t.Fatalf("err = %v, want ErrChecksum", err)
	}
	if _, err := os.Stat(out); err == nil {
		t.Fatal("a corrupt download was left as the output")
	}
}

func TestParseContentRange(t *testing.T) {
	for in, want := range map[string][3]int64{"bytes 100-199/1000": {100, 1000, 1}, "bytes 0-0/1": {0, 1, 1}, "bytes */1000": {0, 0, 0}, "items 1-2/3": {0, 0, 0}} {
		s, tot, ok := parseContentRange(in)
		if ok != (want[2] == 1) || (ok && (s != want[0] || tot != want[1])) {
			t.Errorf("%q: %d %d %v", in, s, tot, ok)
		}
	}
}

// failingReader yields data, then err.
type failingReader struct {
	data    []byte
	err     error
	largest int // the longest read asked for
}

func (r *failingReader) Read(p []byte) (int, error) {
	r.largest = max(r.largest, len(p))
	if len(r.data) == 0 {
		return 0, r.err
	}
	n := copy(p, r.data[:min(len(r.data), 100_000)])
	r.data = r.data[n:]
	return n, nil
}

// A download's copy asks the body for whole copyChunk chunks (fewer
// reads than io.Copy's 32 KiB), writes them to the file in writePiece
// pieces (small page-cache folios: see writePiece), and when the body fails
// mid-chunk, the file holds every byte that arrived and the hash covers
// exactly those bytes, so a reconnection needs no second read of the file.
// A CRC32C is computed on the copying goroutine, a SHA-256 on another.
func TestDownloadCopyHashesExactlyTheFile(t *testing.T) {
	for _, alg := range []string{digestCRC32C, digestSHA256} {
		t.Run(alg, func(t *testing.T) {
			data := randomData(5*copyChunk + 12_345)
			cut := errors.New("connection reset")
			src := &failingReader{data: data, err: cut}
			path := filepath.Join(t.TempDir(), "part")
			f, err := os.Create(path)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			st := &dlState{}
			st.use(alg)
			h := &goroutineHash{Hash: st.h, copier: goroutineID()}
			st.h = h
			w := &pieceWriter{w: f}
			n, err := st.copy(w, src)
			if !errors.Is(err, cut) || n != int64(len(data)) {
				t.Fatalf("copy = %d, %v; want %d, the body's error", n, err, len(data))
			}
			got, _ := os.ReadFile(path)
			want := newDigest(alg)
			want.Write(data)
			if !bytes.Equal(got, data) || st.hashed != n || !bytes.Equal(h.Sum(nil), want.Sum(nil)) {
				t.Fatalf("file %d bytes, hashed %d, hash right: %v", len(got), st.hashed, bytes.Equal(h.Sum(nil), want.Sum(nil)))
			}
			if src.largest < copyChunk {
				t.Fatalf("the copy asked for at most %d bytes a read, want chunks of %d", src.largest, copyChunk)
			}
			if w.largest != writePiece {
				t.Fatalf("the largest write to the file was %d bytes, want %d", w.largest, writePiece)
			}
			inStep, writes := h.onCopier.Load(), h.writes.Load()
			if alg == digestCRC32C && inStep != writes || alg == digestSHA256 && inStep != 0 {
				t.Fatalf("%s: %d of %d hash writes on the copying goroutine", alg, inStep, writes)
			}
		})
	}
}

// goroutineHash counts the writes to a hash, and those made on the
// goroutine copier.
type goroutineHash struct {
	hash.Hash
	copier           string
	writes, onCopier atomic.Int32
}

func (g *goroutineHash) Write(b []byte) (int, error) {
	g.writes.Add(1)
	if goroutineID() == g.copier {
		g.onCopier.Add(1)
	}
	return g.Hash.Write(b)
}

// goroutineID returns the calling goroutine's number, from the first line
// of its stack ("goroutine 7 [running]:").
func goroutineID() string {
	buf := make([]byte, 64)
	buf = buf[:runtime.Stack(buf, false)]
	id, _, _ := bytes.Cut(bytes.TrimPrefix(buf, []byte("goroutine ")), []byte(" "))
	return string(id)
}

// pieceWriter records the largest write it passes on.
type pieceWriter struct {
	w       io.Writer
	largest int
}

func (p *pieceWriter) Write(b []byte) (int, error) {
	p.largest = max(p.largest, len(b))
	return p.w.Write(b)
}

// servePeerDigest is servePeer for fixed content with a Repr-Digest field,
// as ferry's proxy sends for a verified file.
func servePeerDigest(data []byte, reprDigest string, requests *atomic.Int32) *httptest.Server {
	return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		sum := sha256.Sum256(data)
		w.Header().Set("ETag", `"`+hex.EncodeToString(sum[:])+`"`)
		w.Header().Set("Repr-Digest", reprDigest)
		http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(data))
	}))
}

// TestDownloadChecksCRC32C: when the server sends the CRC32C it computed
// with the SHA-256 (Repr-Digest), the bytes are checked by it, a resumed
// download checks its partial prefix too, and the SHA-256 reported is the
// strong ETag's. A CRC32C that does not match fails even bytes whose
// SHA-256 does, proving it is the check; DownloadOptions.SHA256 goes back
// to hashing with SHA-256.
func TestDownloadChecksCRC32C(t *testing.T) {
	data := randomData(3*copyChunk + 4321)
	sum := sha256.Sum256(data)
	hexSum := hex.EncodeToString(sum[:])
	crc := crc32cB64(crc32.Checksum(data, castagnoli))
	wrong := crc32cB64(crc32.Checksum(data[1:], castagnoli))
	ctx := context.Background()
	var requests atomic.Int32

	srv := servePeerDigest(data, "sha-512=:AAAA:, crc32c=:"+crc+":", &requests)
	defer srv.Close()
	out := filepath.Join(t.TempDir(), "f")
	res, err := New(srv.URL, "").Download(ctx, srv.URL+"/x", out, DownloadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(out)
	if !bytes.Equal(got, data) || res.CheckedBy != "crc32c" || res.SHA256 != hexSum {
		t.Fatalf("equal=%v checkedBy=%q sha256=%s", bytes.Equal(got, data), res.CheckedBy, res.SHA256)
	}

	// A resumed download reads its partial prefix through the CRC32C: one
	// damaged byte in it is caught.
	for name, damage := range map[string]bool{"intact prefix": false, "damaged prefix": true} {
		out := filepath.Join(t.TempDir(), "f")
		prefix := bytes.Clone(data[:100_000])
		if damage {
			prefix[50_000] ^= 1
		}
		os.WriteFile(out+".part", prefix, 0o644)
		writeMeta(out+".part.json", partialMeta{ETag: `"` + hexSum + `"`, Size: int64(len(data)), CRC32C: crc})
		requests.Store(0)
		res, err := New(srv.URL, "").Download(ctx, srv.URL+"/x", out, DownloadOptions{})
		if damage {
			if !errors.Is(err, ErrChecksum) {
				t.Fatalf("%s: err = %v, want ErrChecksum", name, err)
			}
			continue
		}
		if err != nil || res.ResumedFrom != 100_000 || res.CheckedBy != "crc32c" || requests.Load() != 1 {
			t.Fatalf("%s: %+v, %v, %d requests", name, res, err, requests.Load())
		}
	}

	bad := servePeerDigest(data, "crc32c=:"+wrong+":", &requests)
	defer bad.Close()
	out = filepath.Join(t.TempDir(), "f")
	if _, err := New(bad.URL, "").Download(ctx, bad.URL+"/x", out, DownloadOptions{}); !errors.Is(err, ErrChecksum) {
		t.Fatalf("a CRC32C that does not match: err = %v, want ErrChecksum", err)
	}
	if _, err := os.Stat(out); err == nil {
		t.Fatal("bytes that failed the CRC32C were left as the output")
	}
	res, err = New(bad.URL, "").Download(ctx, bad.URL+"/x", out, DownloadOptions{SHA256: true})
	if err != nil || res.CheckedBy != "sha256" || res.SHA256 != hexSum {
		t.Fatalf("SHA256 option: %+v, %v", res, err)
	}
}

func TestReprCRC32C(t *testing.T) {
	for in, want := range map[string]string{
		"crc32c=:AAAAAA==:":                    "AAAAAA==",
		"sha-256=:x:, crc32c=:q83vEg==:":       "q83vEg==",
		"crc32c=:q83vEg==:;p=1":                "q83vEg==",
		"crc32c=:AAAA:":                        "", // three bytes
		"crc32c=AAAAAA==":                      "", // a token, not a byte sequence
		"crc32=:AAAAAA==:":                     "",
		"":                                     "",
		"crc32c=:!!!!!!==:":                    "",
		"crc32c=:AAAAAAAA:, crc32c=:AAAAAA==:": "AAAAAA==", // the last one counts
		"crc32c=:AAAAAA==:, crc32c=:AAAAAAAA:": "",
	} {
		if got := reprCRC32C(in); got != want {
			t.Errorf("reprCRC32C(%q) = %q, want %q", in, got, want)
		}
	}
}
