package doctor

import (
	"bytes"
	"context"
	"crypto/md5"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/ferry-io/ferry/config"
	"github.com/ferry-io/ferry/internal/random"
	"github.com/ferry-io/ferry/s3store"
	"github.com/ferry-io/ferry/s3store/embedded"
)

// Clock skew thresholds: SigV4 refuses requests 15 minutes off, and
// presigned URLs and upload expiries drift by the skew well before that.
const (
	skewWarn = time.Minute
	skewFail = 5 * time.Minute
)

// checkStorage reaches the store and runs every storage check.
func checkStorage(ctx context.Context, rep *Report, cfg *config.Config, o Options) {
	endpoint, access, secret := cfg.S3Endpoint, cfg.S3AccessKey, cfg.S3SecretKey
	if cfg.Embedded() {
		ep, ak, sk, how, stop, err := reachEmbedded(ctx, cfg)
		if err != nil {
			rep.add(CheckStore, Fail, err.Error(),
				"FERRY_S3_EMBEDDED_ADDR: a free address, or the one the ferry serving FERRY_DATA_DIR listens on")
			skipStorage(rep, "the store is not reachable")
			return
		}
		defer stop()
		endpoint, access, secret = ep, ak, sk
		rep.add(CheckStore, OK, how, "")
		checkStoreDisk(rep, cfg)
	} else {
		rep.add(CheckStore, OK, "external S3 at "+endpoint, "")
	}

	store, err := s3store.New(ctx, s3store.Config{
		Endpoint: endpoint, PublicEndpoint: cfg.S3PublicEndpoint, Region: cfg.S3Region, Bucket: cfg.S3Bucket,
		AccessKey: access, SecretKey: secret, PathStyle: cfg.S3PathStyle, Timeout: 10 * time.Second,
	})
	if err != nil {
		rep.add(CheckBucket, Fail, err.Error(), "FERRY_S3_ENDPOINT, FERRY_S3_REGION")
		skipStorage(rep, "the store is not usable")
		return
	}
	// Before stop: the embedded store waits for open connections (Close).
	defer store.Close()
	if cfg.Embedded() {
		// ferry's own store: prepare it as serve does, so what follows
		// checks what serve would run on.
		days := int32(cfg.UploadTTL/(24*time.Hour)) + 1
		if _, err := store.Bootstrap(ctx, s3store.BootstrapOptions{Create: true, Region: cfg.S3Region,
			CORSOrigins: cfg.Origins(), AbortIncompleteAfterDays: days}); err != nil {
			rep.add(CheckBucket, Fail, "preparing the embedded bucket: "+err.Error(), "FERRY_S3_BUCKET")
			skipStorage(rep, "the bucket is not reachable")
			return
		}
	}
	if !checkBucket(ctx, rep, cfg, store) {
		skipStorage(rep, "the bucket is not reachable")
		return
	}

	origin := cfg.Origins()[0]
	pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	caps, perr := store.Probe(pctx, s3store.ProbeOptions{Origin: origin})
	cancel()
	cors := checkPublic(ctx, rep, cfg, store, origin, caps.ChecksumCRC32C)
	switch {
	case cors != nil:
		rep.Results = append(rep.Results, *cors)
	case perr != nil:
		rep.add(CheckCORS, Skip, "the public endpoint did not answer and the probe could not run: "+perr.Error(), "")
	case caps.CORS:
		rep.add(CheckCORS, OK, "allows PUT from "+origin+" and exposes ETag (checked on FERRY_S3_ENDPOINT: the public endpoint did not answer)", "")
	default:
		rep.add(CheckCORS, Fail, evidence(caps, s3store.CapCORS)+" (checked on FERRY_S3_ENDPOINT: the public endpoint did not answer)", corsChange(cfg, origin))
	}

	if perr != nil {
		rep.add(CheckChecksums, Skip, "the capability probe could not run: "+perr.Error(), "")
		rep.add(CheckLifecycle, Skip, "the capability probe could not run: "+perr.Error(), "")
	} else {
		if caps.ChecksumCRC32C {
			rep.add(CheckChecksums, OK, "the store verifies CRC32C part and full-object checksums", "")
		} else {
			rep.add(CheckChecksums, Warn, evidence(caps, s3store.CapChecksums)+"; ferry pins each part's Content-MD5 instead",
				"nothing required; a store with CRC32C checksums (AWS S3, recent MinIO) checks whole objects too")
		}
		if caps.Lifecycle {
			rep.add(CheckLifecycle, OK, "a lifecycle rule aborts incomplete multipart uploads", "")
		} else {
			change := "optional: grant s3:PutLifecycleConfiguration to FERRY_S3_ACCESS_KEY, or add the rule yourself (docs/storage.md)"
			if cfg.Embedded() {
				change = "nothing: the embedded store keeps no lifecycle rules"
			}
			rep.add(CheckLifecycle, Warn, evidence(caps, s3store.CapLifecycle)+"; ferry's cleanup job aborts stale uploads every "+cfg.UploadCleanup.String(), change)
		}
	}
	checkClock(ctx, rep, endpoint, o.Now)
}

// checkStoreDisk says whether the embedded store's merges copy the
// upload: a warning, since they work either way, but on a filesystem
// without reflinks every upload's success waits for a second write of
// all its bytes (docs/storage.md, "The embedded store's disk").
func checkStoreDisk(rep *Report, cfg *config.Config) {
	shares, err := embedded.MergesShareBlocks(cfg.DataDir)
	switch {
	case err != nil:
		rep.add(CheckStoreDisk, Skip, "could not ask FERRY_DATA_DIR's filesystem for a reflink: "+err.Error(), "")
	case shares:
		rep.add(CheckStoreDisk, OK, "FERRY_DATA_DIR's filesystem shares blocks between files: a merge copies no bytes", "")
	default:
		rep.add(CheckStoreDisk, Warn, "FERRY_DATA_DIR's filesystem cannot share blocks between files (no reflinks): "+
			"each merge copies the whole upload before the upload succeeds",
			"optional, where uploads are large: put FERRY_DATA_DIR on XFS (reflink=1) or btrfs (docs/storage.md)")
	}
}

func skipStorage(rep *Report, why string) {
	for _, c := range []string{CheckBucket, CheckPublic, CheckCORS, CheckChecksums, CheckLifecycle, CheckClock} {
		if _, done := rep.Find(c); !done {
			rep.add(c, Skip, why, "")
		}
	}
}

func evidence(caps s3store.Capabilities, c s3store.Capability) string {
	for _, m := range caps.Missing {
		if m.Capability == c {
			return m.Evidence
		}
	}
	return string(c) + " missing"
}

// reachEmbedded returns the embedded store's endpoint and credentials: a
// running ferry's when something listens on FERRY_S3_EMBEDDED_ADDR, or a
// server doctor starts on the data dir, which stop ends.
func reachEmbedded(ctx context.Context, cfg *config.Config) (endpoint, access, secret, how string, stop func(), err error) {
	addr := cfg.S3EmbeddedAddr
	if c, derr := net.DialTimeout("tcp", addr, time.Second); derr == nil {
		c.Close()
		access, secret, err = embedded.Credentials(cfg.DataDir)
		if err != nil {
			return "", "", "", "", nil, fmt.Errorf("%s is in use but FERRY_DATA_DIR %s holds no embedded S3 credentials: it is not this ferry's embedded store (%v)",
				addr, cfg.DataDir, err)
		}
		return "http://" + addr, access, secret, "the embedded S3 of the ferry running on " + addr, func() {}, nil
	}
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	gw, err := embedded.Start(sctx, cfg.DataDir, addr)
	if err != nil {
		cancel()
		return "", "", "", "", nil, err
	}
	stop = func() {
		// The gateway waits up to ten seconds for the connections
		// still open to it. The store's are closed by now
		// (Store.Close), but doctor's plain HTTP checks keep theirs,
		// and it has nothing in flight: it waits a moment, not that.
		cancel()
		done := make(chan struct{})
		go func() { gw.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(2 * time.Second):
		}
	}
	return gw.Endpoint, gw.AccessKey, gw.SecretKey, "the embedded S3, started by doctor on " + addr + " over " + cfg.DataDir, stop, nil
}

func checkBucket(ctx context.Context, rep *Report, cfg *config.Config, store *s3store.Store) bool {
	err := store.Ready(ctx)
	switch {
	case err == nil:
		rep.add(CheckBucket, OK, cfg.S3Bucket+" answers HeadBucket", "")
		return true
	case errors.Is(err, s3store.ErrNoSuchBucket):
		change := "FERRY_S3_BUCKET: an existing bucket"
		if !cfg.S3CreateBucket {
			change += ", or FERRY_S3_CREATE_BUCKET=true so serve creates it"
		} else {
			change += " (serve creates it at start-up: FERRY_S3_CREATE_BUCKET=true)"
		}
		rep.add(CheckBucket, Fail, "bucket "+cfg.S3Bucket+" does not exist", change)
	case errors.Is(err, s3store.ErrAccessDenied):
		rep.add(CheckBucket, Fail, "access denied to bucket "+cfg.S3Bucket+": "+err.Error(),
			"FERRY_S3_ACCESS_KEY / FERRY_S3_SECRET_KEY: a key with the permissions in docs/storage.md; FERRY_S3_REGION if the bucket lives elsewhere")
	default:
		rep.add(CheckBucket, Fail, "the store does not answer: "+err.Error(), "FERRY_S3_ENDPOINT: the S3 URL ferry itself reaches")
	}
	return false
}

// checkPublic presigns a PUT against the public endpoint and sends it as a
// browser on origin would: preflight, then the PUT. It adds the public
// endpoint's row and returns the CORS row, or nil when the endpoint did
// not answer (the CORS rule is then judged on the internal endpoint).
func checkPublic(ctx context.Context, rep *Report, cfg *config.Config, store *s3store.Store, origin string, checksums bool) *Result {
	pub := cfg.S3PublicEndpoint
	change := "FERRY_S3_PUBLIC_ENDPOINT: the URL at which browsers reach the same store as FERRY_S3_ENDPOINT (scheme://host:port)"
	fail := func(finding string) *Result {
		rep.add(CheckPublic, Fail, finding, change)
		return nil
	}
	u, err := url.Parse(pub)
	if err != nil || u.Hostname() == "" {
		return fail(fmt.Sprintf("%q is not a URL", pub))
	}
	if net.ParseIP(u.Hostname()) == nil {
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_, err := net.DefaultResolver.LookupHost(rctx, u.Hostname())
		cancel()
		if err != nil {
			return fail(u.Hostname() + " does not resolve: " + err.Error())
		}
	}

	body := []byte("ferry doctor probe")
	sum := md5.Sum(body)
	key := s3store.ScratchPrefix + "doctor-" + random.Hex(8)
	put, err := store.PresignPut(ctx, key, s3store.PutOptions{
		ContentMD5: base64.StdEncoding.EncodeToString(sum[:]), ContentType: "application/octet-stream",
	}, time.Minute)
	if err != nil {
		return fail("presigning: " + err.Error())
	}
	defer func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		store.Delete(dctx, key)
	}()
	hc := &http.Client{Timeout: 10 * time.Second}

	// The preflight asks for every header ferry signs into a part or PUT
	// URL, as the browser SDK and Uppy send them.
	asked := []string{"content-md5", "content-type"}
	for k := range put.Headers {
		if k = strings.ToLower(k); !slices.Contains(asked, k) {
			asked = append(asked, k)
		}
	}
	if checksums {
		asked = append(asked, "x-amz-checksum-crc32c")
	}
	slices.Sort(asked)
	pre, _ := http.NewRequestWithContext(ctx, http.MethodOptions, put.URL, nil)
	pre.Header.Set("Origin", origin)
	pre.Header.Set("Access-Control-Request-Method", http.MethodPut)
	pre.Header.Set("Access-Control-Request-Headers", strings.Join(asked, ","))
	resp, err := hc.Do(pre)
	if err != nil {
		return fail(pub + " does not answer: " + err.Error())
	}
	io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	var cors *Result
	corsFail := func(finding string) {
		if cors == nil {
			cors = &Result{Check: CheckCORS, Status: Fail, Finding: finding, Change: corsChange(cfg, origin)}
		}
	}
	allow := resp.Header.Get("Access-Control-Allow-Origin")
	switch {
	case resp.StatusCode >= 300 || (allow != origin && allow != "*"):
		corsFail(fmt.Sprintf("a preflight for a PUT from %s answered %d with Access-Control-Allow-Origin %q", origin, resp.StatusCode, allow))
	case !listed(resp.Header.Values("Access-Control-Allow-Methods"), "PUT", true):
		corsFail(fmt.Sprintf("the preflight does not allow PUT (Access-Control-Allow-Methods %q)", resp.Header.Get("Access-Control-Allow-Methods")))
	default:
		for _, h := range asked {
			if !listed(resp.Header.Values("Access-Control-Allow-Headers"), h, false) {
				corsFail(fmt.Sprintf("the preflight does not allow the header %s that ferry signs (Access-Control-Allow-Headers %q)",
					h, resp.Header.Get("Access-Control-Allow-Headers")))
				break
			}
		}
	}

	req, _ := http.NewRequestWithContext(ctx, http.MethodPut, put.URL, bytes.NewReader(body))
	for k, v := range put.Headers {
		req.Header.Set(k, v)
	}
	req.Header.Set("Origin", origin)
	resp, err = hc.Do(req)
	if err != nil {
		return fail(pub + " does not answer a presigned PUT: " + err.Error())
	}
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	if resp.StatusCode >= 300 {
		return fail(fmt.Sprintf("a PUT presigned for %s answered %d %s", pub, resp.StatusCode, s3Code(msg)))
	}
	if _, err := store.Head(ctx, key); err != nil {
		return fail(fmt.Sprintf("a PUT presigned for %s succeeded but the object is not in bucket %s on FERRY_S3_ENDPOINT (%v): the two name different stores",
			pub, cfg.S3Bucket, err))
	}
	rep.add(CheckPublic, OK, pub+" resolves and takes a presigned PUT", "")
	allow = resp.Header.Get("Access-Control-Allow-Origin")
	switch {
	case allow != origin && allow != "*":
		corsFail(fmt.Sprintf("the PUT from %s answered Access-Control-Allow-Origin %q", origin, allow))
	case !listed(resp.Header.Values("Access-Control-Expose-Headers"), "etag", false):
		corsFail(fmt.Sprintf("the PUT's answer does not expose ETag (Access-Control-Expose-Headers %q): browsers cannot read it and Uppy fails every part",
			resp.Header.Get("Access-Control-Expose-Headers")))
	}
	if cors == nil {
		cors = &Result{Check: CheckCORS, Status: OK, Finding: "allows PUT from " + origin + " with " + strings.Join(asked, ", ") + " and exposes ETag"}
	}
	return cors
}

func corsChange(cfg *config.Config, origin string) string {
	return "the bucket's CORS rule must allow PUT from " + origin + " (FERRY_PUBLIC_URL; more origins in FERRY_CORS_ORIGINS) " +
		"with the headers content-md5, content-type, x-amz-* and expose ETag: serve sets it at start-up where the store lets it; otherwise set it on the bucket (docs/storage.md)"
}

// listed reports whether a comma-separated header list holds name (or *).
// A method list that is absent counts as allowing when absentOK.
func listed(values []string, name string, absentOK bool) bool {
	if len(values) == 0 {
		return absentOK
	}
	for _, v := range values {
		for _, h := range strings.Split(v, ",") {
			if h = strings.TrimSpace(h); h == "*" || strings.EqualFold(h, name) {
				return true
			}
		}
	}
	return false
}

func s3Code(b []byte) string {
	i, j := bytes.Index(b, []byte("<Code>")), bytes.Index(b, []byte("</Code>"))
	if i >= 0 && j > i {
		return string(b[i+len("<Code>") : j])
	}
	return ""
}

// checkClock compares this host's clock with the Date of the store's
// answer to a plain request (any answer, even a refusal, carries one).
func checkClock(ctx context.Context, rep *Report, endpoint string, now func() time.Time) {
	hc := &http.Client{Timeout: 5 * time.Second}
	req, err := http.NewRequestWithContext(ctx, http.MethodHead, endpoint, nil)
	if err != nil {
		rep.add(CheckClock, Skip, err.Error(), "")
		return
	}
	before := now()
	resp, err := hc.Do(req)
	if err != nil {
		rep.add(CheckClock, Skip, "the store did not answer: "+err.Error(), "")
		return
	}
	resp.Body.Close()
	date, err := http.ParseTime(resp.Header.Get("Date"))
	if err != nil {
		rep.add(CheckClock, Warn, "the store's answer has no Date header", "")
		return
	}
	// Date has one-second resolution: take the middle of the exchange.
	local := before.Add(now().Sub(before) / 2)
	skew := local.Sub(date)
	if skew < 0 {
		skew = -skew
	}
	skew = skew.Round(time.Second)
	finding := fmt.Sprintf("%s from the store's Date (%s)", skew, date.UTC().Format(time.RFC3339))
	change := "sync this host's clock (NTP) or the store's; no FERRY_* setting changes it: SigV4 refuses requests 15 minutes off"
	switch {
	case skew > skewFail:
		rep.add(CheckClock, Fail, finding, change)
	case skew > skewWarn:
		rep.add(CheckClock, Warn, finding, change)
	default:
		rep.add(CheckClock, OK, finding, "")
	}
}
