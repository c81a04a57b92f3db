package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// The targets of issue 8.
const (
	targetUploadRatio   = 0.95 // ferry upload ≥ 0.95× the raw SDK
	targetControlCPU    = 0.05 // ferry serve CPU s/GiB for the control plane
	targetDownloadRatio = 0.90 // ferry download ≥ 0.9× a direct GET
)

// report is a run's raw results and what rendering them needs. It is
// saved as results.json next to results.md, so the figures can be
// re-rendered (-render) or read by a machine.
type report struct {
	Info    runInfo
	Machine machine
	Commit  string
	SHA256  string // of the random file
	DB      string
	Idle    idleCPU
	Results []result
}

// runInfo is how the run was set up.
type runInfo struct {
	Command     string
	Size        int64
	PartSize    int64
	TusChunk    int64
	Runs        int
	Concurrency int
	MySQL       bool
}

// runsOf returns the runs of case c.
func (rp report) runsOf(c string) []result {
	var out []result
	for _, r := range rp.Results {
		if r.Case == c {
			out = append(out, r)
		}
	}
	return out
}

// median of f over rs. Figures of a case are summarised one by one.
func median(rs []result, f func(result) float64) float64 {
	v := make([]float64, len(rs))
	for i, r := range rs {
		v[i] = f(r)
	}
	return medianOf(v)
}

// medianOf is the middle value, or the mean of the two middle ones.
func medianOf(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	v = slices.Clone(v)
	slices.Sort(v)
	if len(v)%2 == 1 {
		return v[len(v)/2]
	}
	return (v[len(v)/2-1] + v[len(v)/2]) / 2
}

// vsCeiling is the median over runs of rate(run of c) divided by the
// ceiling's MiB/s in the same run: cases are compared within a run, where
// they shared the machine's load, never across runs.
func (rp report) vsCeiling(c string, rate func(result) float64) float64 {
	ceil := map[int]float64{}
	for _, r := range rp.runsOf(ceiling(c)) {
		ceil[r.Run] = r.mibps()
	}
	var v []float64
	for _, r := range rp.runsOf(c) {
		if ceil[r.Run] > 0 {
			v = append(v, rate(r)/ceil[r.Run])
		}
	}
	return medianOf(v)
}

// phaseRate is the file's MiB over the wall time of one phase of r.
func phaseRate(name string) func(result) float64 {
	return func(r result) float64 {
		for _, p := range r.Phases {
			if p.Name == name && p.Wall > 0 {
				return float64(r.Bytes) / mib / p.Wall.Seconds()
			}
		}
		return 0
	}
}

// summary is a case's medians.
type summary struct {
	Case                         string
	Runs                         int
	Wall, MiBps                  float64
	Server                       string
	CPUPerGiB, SysPerGiB         float64 // API server
	ReadPerGiB                   float64
	MetricPerGiB                 float64
	MetricName                   string
	Requests                     float64
	S3CPUPerGiB, ClientCPUPerGiB float64
	AllCPUPerGiB                 float64 // client + API server + S3
	Busy                         float64 // AllCPU over wall time: cores kept busy on average
	Load1                        float64
	Phases                       []phaseSummary
	MergeSeconds, VerifySeconds  float64
	SyncSeconds, HashSeconds     float64
}

type phaseSummary struct {
	Name                          string
	Wall, ServerCPU, ServerReadMB float64 // ServerCPU per GiB, ServerReadMB MiB per GiB
	ClientCPU, S3CPU              float64 // per GiB
	Busy                          float64
}

func (rp report) summarise(c string) summary {
	rs := rp.runsOf(c)
	s := summary{Case: c, Runs: len(rs)}
	if len(rs) == 0 {
		return s
	}
	s.Server, s.MetricName = rs[0].Server, rs[0].MetricName
	s.Wall = median(rs, func(r result) float64 { return r.Wall.Seconds() })
	s.MiBps = median(rs, result.mibps)
	s.CPUPerGiB = median(rs, func(r result) float64 { return perGiB(r.ServerCPU, r.Bytes) })
	s.SysPerGiB = median(rs, func(r result) float64 { return perGiB(r.ServerSys, r.Bytes) })
	s.ReadPerGiB = median(rs, func(r result) float64 { return perGiB(float64(r.ServerRead), r.Bytes) })
	s.MetricPerGiB = median(rs, func(r result) float64 { return perGiB(r.MetricBytes, r.Bytes) })
	s.Requests = median(rs, func(r result) float64 { return r.Requests })
	s.S3CPUPerGiB = median(rs, func(r result) float64 { return perGiB(r.S3CPU, r.Bytes) })
	s.ClientCPUPerGiB = median(rs, func(r result) float64 { return perGiB(r.ClientCPU, r.Bytes) })
	s.AllCPUPerGiB = median(rs, func(r result) float64 { return perGiB(r.ClientCPU+r.ServerCPU+r.S3CPU, r.Bytes) })
	s.Busy = median(rs, func(r result) float64 { return (r.ClientCPU + r.ServerCPU + r.S3CPU) / r.Wall.Seconds() })
	s.Load1 = median(rs, func(r result) float64 { return r.Load1 })
	s.MergeSeconds = median(rs, func(r result) float64 { return r.MergeSeconds })
	s.VerifySeconds = median(rs, func(r result) float64 { return r.VerifySeconds })
	s.SyncSeconds = median(rs, func(r result) float64 { return r.SyncSeconds })
	s.HashSeconds = median(rs, func(r result) float64 { return r.HashSeconds })
	for i, p := range rs[0].Phases {
		at := func(r result) phase {
			if i < len(r.Phases) {
				return r.Phases[i]
			}
			return phase{}
		}
		s.Phases = append(s.Phases, phaseSummary{
			Name:         p.Name,
			Wall:         median(rs, func(r result) float64 { return at(r).Wall.Seconds() }),
			ServerCPU:    median(rs, func(r result) float64 { return perGiB(at(r).ServerCPU, r.Bytes) }),
			ServerReadMB: median(rs, func(r result) float64 { return perGiB(float64(at(r).ServerRead), r.Bytes) / mib }),
			ClientCPU:    median(rs, func(r result) float64 { return perGiB(at(r).ClientCPU, r.Bytes) }),
			S3CPU:        median(rs, func(r result) float64 { return perGiB(at(r).S3CPU, r.Bytes) }),
			Busy: median(rs, func(r result) float64 {
				p := at(r)
				return (p.ClientCPU + p.ServerCPU + p.S3CPU) / p.Wall.Seconds()
			}),
		})
	}
	return s
}

func (s summary) phase(name string) phaseSummary {
	for _, p := range s.Phases {
		if p.Name == name {
			return p
		}
	}
	return phaseSummary{}
}

// ceiling is the case each contender is compared with.
func ceiling(c string) string {
	switch c {
	case caseFerryUpload, caseTusdUpload, caseSDKUpload, caseSDKUploadMD5:
		return caseSDKUpload
	}
	return caseS3Get
}

func dash(ok bool, format string, v ...any) string {
	if !ok {
		return "—"
	}
	return fmt.Sprintf(format, v...)
}

// table is the main results table, in markdown: speed and where the CPU
// went.
func (rp report) table() string {
	var b strings.Builder
	b.WriteString("| case | wall s | MiB/s | × ceiling | client CPU s/GiB | API-server CPU s/GiB | S3 CPU s/GiB | all CPU s/GiB | cores busy | load avg (1 min) at start |\n")
	b.WriteString("|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n")
	for _, c := range caseOrder {
		s := rp.summarise(c)
		fmt.Fprintf(&b, "| %s | %.2f | %.1f | %.2f× | %.2f | %s | %.2f | %.2f | %.2f of %d | %.2f |\n",
			caseTitle(c), s.Wall, s.MiBps, rp.vsCeiling(c, result.mibps),
			s.ClientCPUPerGiB, dash(s.Server != "", "%.3f", s.CPUPerGiB), s.S3CPUPerGiB, s.AllCPUPerGiB, s.Busy, rp.Machine.Cores, s.Load1)
	}
	return b.String()
}

// serverTable is what the API servers did per GiB.
func (rp report) serverTable() string {
	var b strings.Builder
	b.WriteString("| case | API server | CPU s/GiB | of which kernel | bytes read/GiB (rchar) | its own byte counter/GiB | requests it counted |\n")
	b.WriteString("|---|---|--:|--:|--:|--:|--:|\n")
	for _, c := range caseOrder {
		s := rp.summarise(c)
		if s.Server == "" {
			continue
		}
		fmt.Fprintf(&b, "| %s | `%s` | %.3f | %.3f | %.1f MiB | %.1f MiB (`%s`) | %.0f |\n",
			caseTitle(c), s.Server, s.CPUPerGiB, s.SysPerGiB, s.ReadPerGiB/mib, s.MetricPerGiB/mib, s.MetricName, s.Requests)
	}
	return b.String()
}

// runsTable lists every run, when there was more than one.
func (rp report) runsTable() string {
	var b strings.Builder
	b.WriteString("| run | case | wall s | MiB/s | × ceiling (same run) | server CPU s | server bytes read | load avg (1 min) at start |\n|--:|---|--:|--:|--:|--:|--:|--:|\n")
	ceil := map[string]float64{}
	for _, r := range rp.Results {
		if r.Case == caseSDKUpload || r.Case == caseS3Get {
			ceil[fmt.Sprint(r.Run, r.Case)] = r.mibps()
		}
	}
	for _, r := range rp.Results {
		fmt.Fprintf(&b, "| %d | %s | %.2f | %.1f | %.2f× | %s | %s | %.2f |\n", r.Run, caseTitle(r.Case), r.Wall.Seconds(), r.mibps(),
			r.mibps()/ceil[fmt.Sprint(r.Run, ceiling(r.Case))],
			dash(r.Server != "", "%.3f", r.ServerCPU), dash(r.Server != "", "%.1f MiB", float64(r.ServerRead)/mib), r.Load1)
	}
	return b.String()
}

// verdict of one target.
type verdict struct {
	Target, Measured string
	Met              bool
	Why              []string // when missed: why, and what would fix it
}

func (rp report) verdicts() []verdict {
	sdk, fu, tu := rp.summarise(caseSDKUpload), rp.summarise(caseFerryUpload), rp.summarise(caseTusdUpload)
	get, fd := rp.summarise(caseS3Get), rp.summarise(caseFerryDownload)
	hash, up, ver := fu.phase("hash"), fu.phase("upload"), fu.phase("verify")
	gibs := float64(rp.Info.Size) / gib
	size := float64(rp.Info.Size) / mib
	transferRate := size / up.Wall
	upRatio, transferRatio := rp.vsCeiling(caseFerryUpload, result.mibps), rp.vsCeiling(caseFerryUpload, phaseRate("upload"))

	v1 := verdict{
		Target: fmt.Sprintf("`ferry upload` end to end ≥ %.2f× the raw SDK", targetUploadRatio),
		Measured: fmt.Sprintf("%.2f× (%.1f vs %.1f MiB/s); the transfer phase alone: %.2f× (%.1f MiB/s)",
			upRatio, fu.MiBps, sdk.MiBps, transferRatio, transferRate),
		Met: upRatio >= targetUploadRatio,
	}
	if !v1.Met {
		v1.Why = append(v1.Why,
			fmt.Sprintf("**The client hashes the whole file before it sends a byte**: %.2f s of the %.2f s (one read of %s yielding its SHA-256 and every part's MD5, "+
				"on two goroutines, with process start and `POST /uploads`). "+
				"ferry needs the digest at init for instant upload (dedup) and to find an unfinished upload of the same content with no local state. "+
				"Fix: hash during the transfer — the client reads the parts in order anyway — and send the digest with `complete`; "+
				"that needs the API to accept the SHA-256 on `complete` and a cheaper key to find a resumable upload (name, size and the first part's hash). "+
				"It hides the hash only where a core is spare: on this two-core machine the transfer already keeps both busy.",
				hash.Wall, fu.Wall, formatSize(rp.Info.Size)),
			fmt.Sprintf("**ferry verifies every byte before the file exists** (design U5): after `complete`, the merge job completes the multipart upload "+
				"(VersityGW assembles the parts) and reads the object back through SHA-256: %.2f s on the server (%.2f s of it the read-back), "+
				"%.2f s until the client saw `success`%s. "+
				"Fix: take the read-back off the critical path: with a checksum per part (see below) and a full-object CRC64NVME on CompleteMultipartUpload, "+
				"S3 itself has checked every byte, so the upload can succeed without reading the object back. "+
				"The dedup index still needs the whole-file SHA-256, so the read-back would then run after `success`, before the content is offered for dedup.",
				fu.MergeSeconds, fu.VerifySeconds, ver.Wall, pollNote(ver.Wall-fu.MergeSeconds)),
		)
		if transferRatio < targetUploadRatio {
			md5 := rp.summarise(caseSDKUploadMD5)
			md5Ratio := rp.vsCeiling(caseSDKUploadMD5, result.mibps)
			v1.Why = append(v1.Why, fmt.Sprintf("**The transfer phase is %.2f× the SDK, and the Content-MD5 that ferry pins on every part is most of that.** "+
				"The same SDK upload with a Content-MD5 per part (second row) runs at %.2f×: hashing it takes the client from %.2f to %.2f CPU s/GiB, "+
				"and checking it takes VersityGW from %.2f to %.2f. On %d cores CPU is wall time: the SDK kept %.2f cores busy, ferry's transfer phase %.2f "+
				"(client %.2f, `ferry serve` %.3f, S3 %.2f CPU s/GiB). ferry's transfer is %.2f× that SDK+MD5 run because its client took the MD5s in the hash phase, so its own API calls (presign) cost little wall time. "+
				"Fix: pin a checksum that is cheap on both ends — an `x-amz-checksum-crc32c` (or CRC64NVME) value signed into each part URL in place of Content-MD5, "+
				"which CPUs compute at memory speed — after checking that the S3 servers ferry supports verify checksums on presigned part uploads; "+
				"the MD5 is then needed only when resuming, to compare local parts with S3's ETags.",
				transferRatio, md5Ratio, sdk.ClientCPUPerGiB, md5.ClientCPUPerGiB, sdk.S3CPUPerGiB, md5.S3CPUPerGiB,
				rp.Machine.Cores, sdk.Busy, up.Busy, up.ClientCPU, up.ServerCPU, up.S3CPU, transferRate/md5.MiBps))
		}
	}

	control := up.ServerCPU + hash.ServerCPU
	idleShare := rp.Idle.Ferry * (hash.Wall + up.Wall) / gibs
	v2 := verdict{
		Target: fmt.Sprintf("ferry's API-server CPU ≤ %.2f s/GiB for the control plane", targetControlCPU),
		Measured: fmt.Sprintf("%.3f s/GiB from start to `complete` (%.0f API requests per GiB; idle polling would account for %.3f of it); "+
			"with the merge's read-back verification %.3f s/GiB; tusd: %.3f s/GiB (%.3f of it in user space, the rest the kernel moving its bytes)",
			control, fu.Requests/gibs, idleShare, fu.CPUPerGiB, tu.CPUPerGiB, tu.CPUPerGiB-tu.SysPerGiB),
		Met: control <= targetControlCPU,
	}
	if !v2.Met {
		perReq := control * gibs / fu.Requests * 1000
		dbWork := "executed inside `ferry serve` by a pure-Go SQLite"
		if rp.Info.MySQL {
			dbWork = "executed by the MySQL server (whose CPU is not counted here; `ferry serve` pays for building the queries and the round trips)"
		}
		profileNote := "a one-off CPU profile of `ferry serve` during this benchmark put most handler time in the database layer, SQLite parsing every statement anew, so "
		if rp.Info.MySQL {
			profileNote = ""
		}
		larger := ""
		if rp.Info.PartSize < 64*mib {
			larger = fmt.Sprintf(", and pick larger parts for large files (64 MiB parts make 16 per GiB instead of %d; bench/results/part-size-64MiB measures that)",
				gib/rp.Info.PartSize)
		}
		v2.Why = append(v2.Why, fmt.Sprintf("The control plane is one `POST /uploads`, a presign call per 128 parts, `complete` and the status polls: "+
			"%.0f requests per GiB with %s parts, at about %.1f ms of CPU each. Every request authenticates its bearer token (a SQL join), loads the upload "+
			"and renews its expiry (a write), %s, and every request writes a JSON log line. "+
			"Fix: fewer requests per GiB%s; "+
			"and cheaper requests — %skeep prepared statements (GORM's PrepareStmt), and renew the expiry at most once a minute instead of on every call.",
			fu.Requests/gibs, formatSize(rp.Info.PartSize), perReq, dbWork, larger, profileNote))
	}
	v2.Why = append(v2.Why, fmt.Sprintf("Not in the target, but measured: the merge's verification reads the object back (%.0f MiB per GiB into `ferry serve`) and hashes it, %.3f s of CPU per GiB. "+
		"That is data-plane work, once per upload and after the transfer; it is what keeps unverified bytes out of the dedup index (design U5, U6).",
		ver.ServerReadMB, ver.ServerCPU))

	dlTransfer, dlAfter := fd.phase("transfer"), fd.phase("verify")
	dlRate := size / dlTransfer.Wall
	dlRatio, dlTransferRatio := rp.vsCeiling(caseFerryDownload, result.mibps), rp.vsCeiling(caseFerryDownload, phaseRate("transfer"))
	v3 := verdict{
		Target: fmt.Sprintf("`ferry download` ≥ %.2f× a direct S3 GET", targetDownloadRatio),
		Measured: fmt.Sprintf("%.2f× (%.1f vs %.1f MiB/s); the transfer alone: %.2f× (%.1f MiB/s)",
			dlRatio, fd.MiBps, get.MiBps, dlTransferRatio, dlRate),
		Met: dlRatio >= targetDownloadRatio,
	}
	if !v3.Met {
		v3.Why = append(v3.Why,
			fmt.Sprintf("The CLI hashes the body as it writes it, so checking the SHA-256 after the transfer takes %.2f s "+
				"(for scale, an fsync and a second read of the direct GET's file took %.2f s and %.2f s); "+
				"what remains is hashing 1 GiB on the client's core during the transfer, which the direct GET does not do.",
				dlAfter.Wall, get.SyncSeconds, get.HashSeconds))
		if dlTransferRatio < targetDownloadRatio {
			v3.Why = append(v3.Why, fmt.Sprintf("The proxied transfer alone is %.2f× the direct GET: every byte is read from S3 and written again by `ferry serve` (%.3f s of CPU per GiB), "+
				"on the same two cores as the client and S3. That is the price of a link that can be revoked at any moment; a presigned S3 redirect would remove it and the revocation with it.",
				dlTransferRatio, fd.CPUPerGiB))
		}
	}
	return []verdict{v1, v2, v3}
}

// pollNote explains the client's wait beyond the merge when it is
// noticeable: the CLI polls the upload's state with a growing delay.
func pollNote(extra float64) string {
	if extra < 0.15 {
		return ""
	}
	return fmt.Sprintf("; the %.2f s between them is the client's status polling (100 ms growing by half to 1 s), which a long poll would save", extra)
}

// phasesTable splits the ferry upload and download into their phases.
func (rp report) phasesTable() string {
	var b strings.Builder
	fu := rp.summarise(caseFerryUpload)
	what := map[string]string{
		"hash":   "CLI start, one read of the file for its SHA-256 and the part MD5s, `POST /uploads`",
		"upload": "presign (one call per 128 parts), part PUTs straight to S3 with Content-MD5, `complete`",
		"verify": fmt.Sprintf("the merge job: CompleteMultipartUpload, then read back + SHA-256 (%.2f s on the server, %.2f s of it the read-back); the client polls for `success`",
			fu.MergeSeconds, fu.VerifySeconds),
		"transfer": "the proxied GET, S3 → `ferry serve` → CLI → file",
	}
	header := func(kind string) {
		fmt.Fprintf(&b, "| %s phase | what happens | wall s | `ferry serve` CPU s/GiB | `ferry serve` bytes read/GiB | CLI CPU s/GiB | S3 CPU s/GiB | cores busy |\n", kind)
		b.WriteString("|---|---|--:|--:|--:|--:|--:|--:|\n")
	}
	row := func(p phaseSummary) {
		fmt.Fprintf(&b, "| %s | %s | %.2f | %.3f | %.1f MiB | %.2f | %.2f | %.2f |\n",
			p.Name, what[p.Name], p.Wall, p.ServerCPU, p.ServerReadMB, p.ClientCPU, p.S3CPU, p.Busy)
	}
	header("ferry upload")
	for _, p := range fu.Phases {
		row(p)
	}
	fd := rp.summarise(caseFerryDownload)
	if len(fd.Phases) > 0 {
		b.WriteString("\n")
		header("ferry download")
		what["verify"] = "the CLI compares the SHA-256 it took while writing with the ETag, and renames the file"
		for _, p := range fd.Phases {
			row(p)
		}
	}
	return b.String()
}

// markdown is results.md.
func (rp report) markdown() string {
	m := rp.Machine
	var b strings.Builder
	fmt.Fprintf(&b, "# ferry benchmarks: upload and download against the raw SDK and tusd\n\n")
	fmt.Fprintf(&b, "Written by `%s` on %s (%s to %s UTC). Every case used the same %s random file (sha256 `%s`) and the same standalone VersityGW on loopback.\n\n",
		rp.Info.Command, m.Started.UTC().Format("2006-01-02"), m.Started.UTC().Format("15:04"), m.Finished.UTC().Format("15:04"), formatSize(rp.Info.Size), rp.SHA256)

	b.WriteString("## Machine\n\n| | |\n|---|---|\n")
	fmt.Fprintf(&b, "| CPU | %s, %d cores (shared with other work; see the load average) |\n", m.CPU, m.Cores)
	fmt.Fprintf(&b, "| RAM | %s |\n| Kernel | Linux %s |\n| Go | %s |\n", m.RAM, m.Kernel, m.GoVersion)
	fmt.Fprintf(&b, "| Load average (1, 5, 15 min) at start | %s |\n| Load average at end | %s |\n", m.LoadStart, m.LoadEnd)
	fmt.Fprintf(&b, "| ferry | code at `%s`, database: %s, part size %s, client concurrency %d |\n", rp.Commit, rp.DB, formatSize(rp.Info.PartSize), rp.Info.Concurrency)
	fmt.Fprintf(&b, "| S3 | VersityGW %s, standalone process, POSIX backend on the local disk, keep-alive on |\n", versityTool().version)
	fmt.Fprintf(&b, "| tusd | %s, S3 store with its defaults (50 MiB parts, 10 part uploads at once, MD5 and SHA-256 of each part), ", tusdTool().version)
	if rp.Info.TusChunk > 0 {
		fmt.Fprintf(&b, "PATCH chunks of %s |\n", formatSize(rp.Info.TusChunk))
	} else {
		b.WriteString("the whole file in one PATCH |\n")
	}
	fmt.Fprintf(&b, "| raw SDK | aws-sdk-go-v2, hand-written parallel multipart: %s parts, %d at once, UNSIGNED-PAYLOAD, no checksums |\n\n", formatSize(rp.Info.PartSize), rp.Info.Concurrency)

	b.WriteString("## Results\n\n")
	if rp.Info.Runs > 1 {
		fmt.Fprintf(&b, "Medians of %d runs; × ceiling is the median of the ratios within each run. Every run is listed below.\n\n", rp.Info.Runs)
	}
	b.WriteString(rp.table())
	b.WriteString("\n![Throughput and API-server CPU per GiB](chart.png)\n\n### The API servers\n\n")
	b.WriteString(rp.serverTable())
	b.WriteString("\n### ferry, phase by phase\n\n")
	b.WriteString(rp.phasesTable())
	if rp.Info.Runs > 1 {
		b.WriteString("\n### Every run\n\n")
		b.WriteString(rp.runsTable())
	}

	b.WriteString("\n## Targets\n\n| target | measured | |\n|---|---|---|\n")
	vs := rp.verdicts()
	for _, v := range vs {
		mark := "**met**"
		if !v.Met {
			mark = "**missed**"
		}
		fmt.Fprintf(&b, "| %s | %s | %s |\n", v.Target, v.Measured, mark)
	}
	for _, v := range vs {
		if len(v.Why) == 0 {
			continue
		}
		status := "met"
		if !v.Met {
			status = "missed: why, and what would fix it"
		}
		fmt.Fprintf(&b, "\n### %s — %s\n\n", v.Target, status)
		for _, w := range v.Why {
			fmt.Fprintf(&b, "- %s\n", w)
		}
	}

	b.WriteString(`
## How the figures are taken

- **Wall time** runs from the start of the client (for the CLI, the process start) to its exit or last
  response; MiB/s is the file size over it. The ferry CLI's phases are timed from its ` + "`--json`" + ` progress lines.
- **CPU** is utime+stime from ` + "`/proc/<pid>/stat`" + ` (10 ms ticks) read just before and just after each case, for the
  API server (` + "`ferry serve`" + `, tusd), for VersityGW, and for the client (the CLI process; the bench process itself
  for the in-process SDK and tus clients). For the ferry CLI, all three are also read whenever its progress changes
  phase, which splits the upload's control plane from the merge's verification. "Cores busy" is the CPU of all three
  over the wall time.
- **Bytes read** is the rchar delta from ` + "`/proc/<pid>/io`" + `: every read(2), sockets and files alike — request
  bodies, S3 responses, tusd's part buffers on disk, SQLite pages. The servers' own counters
  (` + "`ferry_upload_verify_bytes_total`, `ferry_download_bytes_total`, `tusd_bytes_received`" + `) and request counts
  (` + "`ferry_http_requests_total`, `tusd_requests_total`" + `) come from their /metrics, scraped outside the measured window.
- Before each case the bench calls sync(2) and waits, so one case's write-back does not land in the next.
  The file stays in the page cache throughout (RAM is ample), so disk reads do not differ between cases.
- **Idle floor**: measured for 10 s before the first case, ` + "`ferry serve`" + ` used ` + fmt.Sprintf("%.4f", rp.Idle.Ferry) + ` CPU s per second doing nothing
  (job and outbox polls) and tusd ` + fmt.Sprintf("%.4f", rp.Idle.Tusd) + `; the figures above include it, not subtracted.
- All processes share the machine's cores: the S3 server's and the client's CPU compete with the API server's,
  which is why tusd's and ferry's proxy paths also cost wall time. A busy machine (see the load average) slows
  every case; compare cases within a run, not across runs.
`)
	return b.String()
}

// write saves results.json, results.md and chart.png into dir.
func (rp report) write(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	raw, err := json.MarshalIndent(rp, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "results.json"), append(raw, '\n'), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "results.md"), []byte(rp.markdown()), 0o644); err != nil {
		return err
	}
	return rp.chart(filepath.Join(dir, "chart.png"))
}

// loadReport reads a results.json written by an earlier run.
func loadReport(path string) (report, error) {
	var rp report
	b, err := os.ReadFile(path)
	if err != nil {
		return rp, err
	}
	if err := json.Unmarshal(b, &rp); err != nil {
		return rp, fmt.Errorf("%s: %w", path, err)
	}
	return rp, nil
}
