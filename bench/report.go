package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// The targets of issue 12.
const (
	targetUploadRatio   = 0.95 // ferry upload ≥ 0.95× the raw SDK with a CRC32C per part
	targetTusdRatio     = 1.3  // ferry upload ≥ 1.3× tusd
	targetFinishSlack   = 0.2  // last part sent → success ≤ S3's CompleteMultipartUpload + 0.2 s
	targetDownloadRatio = 0.95 // ferry download ≥ 0.95× a direct GET
	targetControlCPU    = 0.05 // ferry serve CPU s/GiB for the control plane
	targetTotalCPU      = 0.8  // … and with the background SHA-256
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
	Warmup      int // rounds of every case run before the counted ones
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
	return rp.versus(c, ceiling(c), rate)
}

// versus is vsCeiling against any other case ref.
func (rp report) versus(c, ref string, rate func(result) float64) float64 {
	base := map[int]float64{}
	for _, r := range rp.runsOf(ref) {
		base[r.Run] = r.mibps()
	}
	var v []float64
	for _, r := range rp.runsOf(c) {
		if base[r.Run] > 0 {
			v = append(v, rate(r)/base[r.Run])
		}
	}
	return medianOf(v)
}

// sameRun is the median over runs of f(run of c, run of ref).
func (rp report) sameRun(c, ref string, f func(r, ref result) float64) float64 {
	refs := map[int]result{}
	for _, r := range rp.runsOf(ref) {
		refs[r.Run] = r
	}
	var v []float64
	for _, r := range rp.runsOf(c) {
		if x, ok := refs[r.Run]; ok {
			v = append(v, f(r, x))
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
	Case                                  string
	Runs                                  int
	Wall, MiBps                           float64
	Server                                string
	CPUPerGiB, SysPerGiB                  float64 // API server
	ReadPerGiB                            float64
	MetricPerGiB                          float64
	MetricName                            string
	Requests                              float64
	S3CPUPerGiB, ClientCPUPerGiB          float64
	AllCPUPerGiB                          float64 // client + API server + S3
	Busy                                  float64 // AllCPU over wall time: cores kept busy on average
	Load1                                 float64
	Phases                                []phaseSummary
	MergeSeconds, VerifySeconds           float64
	SyncSeconds, HashSeconds              float64
	CompleteSeconds                       float64
	SentToSuccess, ServerSuccess          float64
	ControlCPUPerGiB, BackgroundCPUPerGiB float64
	Tool, Checksum                        string
}

type phaseSummary struct {
	Name                          string
	Wall, ServerCPU, ServerReadMB float64 // ServerCPU per GiB, ServerReadMB MiB per GiB
	ServerSys                     float64 // per GiB
	ClientCPU, S3CPU              float64 // per GiB
	Busy                          float64
}

func (rp report) summarise(c string) summary {
	rs := rp.runsOf(c)
	s := summary{Case: c, Runs: len(rs)}
	if len(rs) == 0 {
		return s
	}
	s.Server, s.MetricName, s.Tool, s.Checksum = rs[0].Server, rs[0].MetricName, rs[0].Tool, rs[0].Checksum
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
	s.CompleteSeconds = median(rs, func(r result) float64 { return r.CompleteSeconds })
	s.SentToSuccess = median(rs, func(r result) float64 { return r.SentToSuccess })
	s.ServerSuccess = median(rs, func(r result) float64 { return r.ServerSuccess })
	s.ControlCPUPerGiB = median(rs, func(r result) float64 { return perGiB(r.ControlCPU, r.Bytes) })
	s.BackgroundCPUPerGiB = median(rs, func(r result) float64 { return perGiB(r.BackgroundCPU, r.Bytes) })
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
			ServerSys:    median(rs, func(r result) float64 { return perGiB(at(r).ServerSys, r.Bytes) }),
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
	case caseFerryUpload, caseFerryInstant, caseTusdUpload, caseAWSCLIUpload, caseSDKUpload, caseSDKUploadMD5, caseSDKUploadCRC32:
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
// went. Uploads are compared with both ceilings, each within its run.
func (rp report) table() string {
	var b strings.Builder
	b.WriteString("| case | wall s | MiB/s | × ceiling | × SDK+CRC32C | client CPU s/GiB | API-server CPU s/GiB | S3 CPU s/GiB | all CPU s/GiB | cores busy | load avg (1 min) at start |\n")
	b.WriteString("|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n")
	for _, c := range rp.cases() {
		s := rp.summarise(c)
		crc := ceiling(c) == caseSDKUpload && len(rp.runsOf(caseSDKUploadCRC32)) > 0
		fmt.Fprintf(&b, "| %s | %.2f | %.1f | %.2f× | %s | %.2f | %s | %.2f | %.2f | %.2f of %d | %.2f |\n",
			caseTitle(c), s.Wall, s.MiBps, rp.vsCeiling(c, result.mibps), dash(crc, "%.2f×", rp.versus(c, caseSDKUploadCRC32, result.mibps)),
			s.ClientCPUPerGiB, dash(s.Server != "", "%.3f", s.CPUPerGiB), s.S3CPUPerGiB, s.AllCPUPerGiB, s.Busy, rp.Machine.Cores, s.Load1)
	}
	return b.String()
}

// cases are the cases this run has, in the table's order (`aws s3 cp`
// runs only where the CLI is installed).
func (rp report) cases() []string {
	var out []string
	for _, c := range caseOrder {
		if len(rp.runsOf(c)) > 0 {
			out = append(out, c)
		}
	}
	return out
}

// serverTable is what the API servers did per GiB.
func (rp report) serverTable() string {
	var b strings.Builder
	b.WriteString("| case | API server | CPU s/GiB | of which kernel | bytes read/GiB (rchar) | its own byte counter/GiB | requests it counted |\n")
	b.WriteString("|---|---|--:|--:|--:|--:|--:|\n")
	for _, c := range rp.cases() {
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
	sdk, crc, fu, tu := rp.summarise(caseSDKUpload), rp.summarise(caseSDKUploadCRC32), rp.summarise(caseFerryUpload), rp.summarise(caseTusdUpload)
	get, fd := rp.summarise(caseS3Get), rp.summarise(caseFerryDownload)
	setup, xfer, finish, bg := fu.phase("setup"), fu.phase("transfer"), fu.phase("finish"), fu.phase("sha256")
	gibs := float64(rp.Info.Size) / gib
	size := float64(rp.Info.Size) / mib
	cores := rp.Machine.Cores

	upRatio := rp.versus(caseFerryUpload, caseSDKUploadCRC32, result.mibps)
	xferRatio := rp.versus(caseFerryUpload, caseSDKUploadCRC32, phaseRate("transfer"))
	v1 := verdict{
		Target: fmt.Sprintf("`ferry upload` end to end ≥ %.2f× the raw SDK with a CRC32C per part", targetUploadRatio),
		Measured: fmt.Sprintf("%.2f× (%.1f vs %.1f MiB/s; %.2f× the plain SDK at %.1f MiB/s); the transfer phase alone: %.2f× (%.1f MiB/s)",
			upRatio, fu.MiBps, crc.MiBps, rp.versus(caseFerryUpload, caseSDKUpload, result.mibps), sdk.MiBps, xferRatio, size/xfer.Wall),
		Met: upRatio >= targetUploadRatio,
	}
	if in := rp.summarise(caseFerryInstant); in.Runs > 0 {
		v1.Measured += fmt.Sprintf("; uploading the same file again while ferry holds it: instant after %.2f s (the CLI hashes it first, %.2f CPU s/GiB), no part sent",
			in.Wall, in.ClientCPUPerGiB)
	}
	if !v1.Met {
		v1.Why = append(v1.Why, fmt.Sprintf("Where the %.2f s go: setup %.2f s, transfer %.2f s, last part sent → the client sees success %.2f s; "+
			"the ceiling took %.2f s in all, %.2f s of it S3's CompleteMultipartUpload.",
			fu.Wall, setup.Wall, xfer.Wall, fu.SentToSuccess, crc.Wall, crc.CompleteSeconds))
		if setup.Wall > 0.1 {
			what := "`POST /uploads` and the CLI's start"
			if setup.ClientCPU > 0.3 {
				what = fmt.Sprintf("the client reading and hashing the file before its first PUT (%.2f CLI CPU s/GiB), `POST /uploads` and the CLI's start", setup.ClientCPU)
			}
			v1.Why = append(v1.Why, fmt.Sprintf("**%.2f s of the %.2f s pass before the first part is sent**: %s. "+
				"A client that hashes only when ferry may hold the content leaves only the API call here.", setup.Wall, fu.Wall, what))
		}
		if xferRatio < targetUploadRatio {
			md5 := rp.summarise(caseSDKUploadMD5)
			v1.Why = append(v1.Why, fmt.Sprintf("**The transfer phase runs at %.2f× the SDK+CRC32C ceiling.** On %d cores CPU is wall time: "+
				"ferry's transfer kept %.2f cores busy (CLI %.2f, `ferry serve` %.3f, S3 %.2f CPU s/GiB), the ceiling %.2f (client %.2f, S3 %.2f). "+
				"Integrity work shows in both columns: the raw SDK with a Content-MD5 per part instead costs client %.2f and S3 %.2f CPU s/GiB. "+
				"Pinning only the CRC32C in each part URL, computed in the read that feeds the PUT, brings ferry's part PUTs to the ceiling's cost.",
				xferRatio, cores, xfer.Busy, xfer.ClientCPU, xfer.ServerCPU, xfer.S3CPU, crc.Busy, crc.ClientCPUPerGiB, crc.S3CPUPerGiB,
				md5.ClientCPUPerGiB, md5.S3CPUPerGiB))
		}
		if extra := fu.ClientCPUPerGiB - crc.ClientCPUPerGiB; extra > 0.3 {
			v1.Why = append(v1.Why, fmt.Sprintf("**The CLI spends %.2f CPU s/GiB, %.2f more than the SDK+CRC32C client's %.2f.** "+
				"On %d cores the client, `ferry serve` and S3 share %.2f cores busy, so that CPU is wall time.",
				fu.ClientCPUPerGiB, extra, crc.ClientCPUPerGiB, cores, fu.Busy))
		}
		if extra := finish.Wall - crc.CompleteSeconds; extra > targetFinishSlack {
			v1.Why = append(v1.Why, fmt.Sprintf("**%.2f s from the last part sent to success**, against %.2f s for S3's own CompleteMultipartUpload: see the target on it below.",
				fu.SentToSuccess, crc.CompleteSeconds))
		}
	}

	tusRatio := rp.versus(caseFerryUpload, caseTusdUpload, result.mibps)
	v2 := verdict{
		Target:   fmt.Sprintf("`ferry upload` ≥ %.1f× tusd v2", targetTusdRatio),
		Measured: fmt.Sprintf("%.2f× (%.1f vs %.1f MiB/s)", tusRatio, fu.MiBps, tu.MiBps),
		Met:      tusRatio >= targetTusdRatio,
	}
	if !v2.Met {
		v2.Why = append(v2.Why, fmt.Sprintf("tusd moves every byte through its own process (%.3f CPU s/GiB, %.0f MiB read per GiB) and still runs at %.2f× the ceiling; "+
			"ferry's bytes go straight to S3, so what separates them is ferry's time outside the transfer, listed under the first target.",
			tu.CPUPerGiB, tu.ReadPerGiB/mib, rp.vsCeiling(caseTusdUpload, result.mibps)))
	}

	// S3's time for the same kind of completion ferry's upload asked for:
	// with a full-object CRC32C, or (Content-MD5 parts) without one.
	ref, refKind := caseSDKUploadCRC32, "with a FULL_OBJECT CRC32C, as ferry's upload had"
	if fu.Checksum == "" {
		ref, refKind = caseSDKUpload, "without a full-object checksum, as ferry's upload had"
	}
	// S3's time for the completion itself is its answer to ferry's own
	// merge job, as ferry times it: the target is about ferry's time
	// around it. Two merges of the same bytes can differ by more than the
	// target's 0.2 s where the store copies the parts (VersityGW's POSIX
	// backend on ext4: 1.0–2.0 s per GiB from run to run on one machine),
	// so the raw SDK's complete of the same file in the same run, the
	// figure this target used to be judged by, is shown beside it and
	// decides only where ferry's own is not known (a ferry without
	// ferry_s3_request_duration_seconds).
	s3Complete := rp.summarise(ref).CompleteSeconds
	vsSDK := rp.sameRun(caseFerryUpload, ref, func(r, ref result) float64 { return r.SentToSuccess - ref.CompleteSeconds })
	own := median(rp.runsOf(caseFerryUpload), func(r result) float64 { return r.SentToSuccess - r.CompleteSeconds })
	known := fu.CompleteSeconds > 0
	slack, s3Own := vsSDK, s3Complete
	measured := fmt.Sprintf("%.2f s, ", fu.SentToSuccess)
	if known {
		slack, s3Own = own, fu.CompleteSeconds
		measured += fmt.Sprintf("%s S3's CompleteMultipartUpload in the same upload (%.2f s, S3's answer to ferry's merge job, timed by ferry); "+
			"%s ", overUnder(own), fu.CompleteSeconds, overUnder(vsSDK))
	} else {
		measured += overUnder(vsSDK) + " "
	}
	measured += fmt.Sprintf("S3's CompleteMultipartUpload of the same file %s (%.2f s, timed around the raw SDK's call; with a CRC32C %.2f s, without %.2f s); "+
		"the CLI printed its success (ferry answers its long poll when it records success) %.2f s after the last part was sent; ferry's merge job took %.2f s",
		refKind, s3Complete, crc.CompleteSeconds, sdk.CompleteSeconds, fu.ServerSuccess, fu.MergeSeconds)
	v3 := verdict{
		Target:   fmt.Sprintf("last part sent → `ferry upload` sees `success` ≤ S3's CompleteMultipartUpload + %.1f s", targetFinishSlack),
		Measured: measured,
		Met:      slack <= targetFinishSlack,
	}
	if !v3.Met {
		if lag := fu.SentToSuccess - fu.ServerSuccess; lag > 0.05 {
			v3.Why = append(v3.Why, fmt.Sprintf("**The CLI exited %.2f s after printing its success.**", lag))
		}
		if before := fu.ServerSuccess - fu.MergeSeconds; before > 0.1 {
			v3.Why = append(v3.Why, fmt.Sprintf("**%.2f s between the last part sent and the merge job's start**: the last PUT's answer, `complete` "+
				"(ListParts and a transaction), and the job queue's pickup of the merge.", before))
		}
		if over := fu.MergeSeconds - s3Own; over > 0.1 {
			whose := "in the same upload"
			if !known {
				whose = "of the same file in the raw SDK run"
			}
			v3.Why = append(v3.Why, fmt.Sprintf("**The merge job took %.2f s, %.2f s more than S3's CompleteMultipartUpload %s**: "+
				"the job's ListParts and database transaction, or a busier machine between the two (see the load average of each case).",
				fu.MergeSeconds, over, whose))
		}
	}

	dlTransfer := fd.phase("transfer")
	dlRatio, dlTransferRatio := rp.vsCeiling(caseFerryDownload, result.mibps), rp.vsCeiling(caseFerryDownload, phaseRate("transfer"))
	v4 := verdict{
		Target: fmt.Sprintf("`ferry download` ≥ %.2f× a direct SDK GET into a file", targetDownloadRatio),
		Measured: fmt.Sprintf("%.2f× (%.1f vs %.1f MiB/s); the transfer alone: %.2f× (%.1f MiB/s)",
			dlRatio, fd.MiBps, get.MiBps, dlTransferRatio, size/dlTransfer.Wall),
		Met: dlRatio >= targetDownloadRatio,
	}
	if fd.Checksum != "" {
		v4.Measured += fmt.Sprintf("; checked by %s", digestName(fd.Checksum))
	}
	if sha := rp.summarise(caseFerryDownloadSHA); sha.MiBps > 0 {
		v4.Measured += fmt.Sprintf("; `--sha256`, the CLI hashing the bytes itself: %.2f× (%.1f MiB/s, CLI %.2f CPU s/GiB against %.2f)",
			rp.vsCeiling(caseFerryDownloadSHA, result.mibps), sha.MiBps, sha.ClientCPUPerGiB, fd.ClientCPUPerGiB)
	}
	if !v4.Met {
		why := fmt.Sprintf("`ferry serve` hands S3's socket to the client's (splice(2), for S3 over plain HTTP): %.3f CPU s/GiB, %.3f of it in the kernel. "+
			"The rest is the CLI, which checks every byte it writes with %s (%.2f CPU s/GiB against %.2f for the direct GET's client, which checks nothing)",
			fd.CPUPerGiB, fd.SysPerGiB, digestName(fd.Checksum), fd.ClientCPUPerGiB, get.ClientCPUPerGiB)
		if r := rp.Machine.sha256Best(); r > 0 && fd.Checksum != "crc32c" {
			why += fmt.Sprintf("; the hash alone is %.2f s per GiB at %.2f GB/s on one core here", float64(1<<30)/(r*1e9), r)
		}
		why += fmt.Sprintf(". All of ferry's download took %.2f CPU s/GiB on the %d cores it shared with S3, so at least %.2f s per GiB, against %.2f s for the whole direct GET (%.2f CPU s/GiB); "+
			"%.2f cores were busy against %.2f. ", fd.AllCPUPerGiB, cores, fd.AllCPUPerGiB/float64(cores), float64(1<<10)/get.MiBps, get.AllCPUPerGiB, fd.Busy, get.Busy)
		v4.Why = append(v4.Why, why+"What would close the gap is less CPU in the CLI: splicing the socket into the file and checking the file's pages in place "+
			"would drop its two user-space copies. The proxy alone: BenchmarkProxyVsDirect in download/.")
	}
	v4.Why = append(v4.Why, "The memory half of this target (RSS < 128 MiB with 32 concurrent downloads) is measured by BenchmarkConcurrent32 in download/, not by this program.")

	idleShare := rp.Idle.Ferry * (fu.Wall) / gibs
	total := fu.ControlCPUPerGiB + fu.BackgroundCPUPerGiB
	v5 := verdict{
		Target: fmt.Sprintf("`ferry serve` CPU per GiB uploaded ≤ %.2f s for the control plane, ≤ %.1f s with the background SHA-256", targetControlCPU, targetTotalCPU),
		Measured: fmt.Sprintf("control plane %.3f s/GiB (start to success: %.0f API requests per GiB and the merge; idle polling accounts for %.3f of it); "+
			"the verify job after success %.3f s/GiB (%.2f s in the job); together %.3f s/GiB; tusd: %.3f s/GiB",
			fu.ControlCPUPerGiB, fu.Requests/gibs, idleShare, fu.BackgroundCPUPerGiB, fu.VerifySeconds, total, tu.CPUPerGiB),
		Met: fu.ControlCPUPerGiB <= targetControlCPU && total <= targetTotalCPU,
	}
	if fu.ControlCPUPerGiB > targetControlCPU {
		v5.Why = append(v5.Why, fmt.Sprintf("The control plane: %.0f requests per GiB with %s parts, about %.1f ms of CPU each (authentication, the upload's row, a JSON log line), "+
			"the merge job, and the job and outbox polls. Fewer requests per GiB (larger parts, larger presign windows) and cheaper ones close it.",
			fu.Requests/gibs, formatSize(rp.Info.PartSize), fu.ControlCPUPerGiB*gibs/max(fu.Requests, 1)*1000))
	}
	hashes := "SHA-256 and CRC32C (the upload had no checksums for S3 to check)"
	if fu.Checksum != "" {
		hashes = "SHA-256 alone (the whole file's CRC32C is the one S3 checked at completion)"
	}
	why := fmt.Sprintf("The verify job read %.0f MiB per GiB back from S3 and hashed it with %s: %.3f CPU s/GiB, %.3f of it in the kernel receiving the GET. ",
		bg.ServerReadMB, hashes, fu.BackgroundCPUPerGiB, bg.ServerSys)
	hashRate := rp.Machine.sha256Best()
	hashCPU := 0.0
	if hashRate > 0 {
		hashCPU = gib / 1e9 / hashRate
		why += fmt.Sprintf("SHA-256 on its own ran at %.2f GB/s on this machine, %.2f s per GiB; the other %.2f s are the receive and the read loop. ",
			hashRate, hashCPU, fu.BackgroundCPUPerGiB-hashCPU)
	}
	switch {
	case total > targetTotalCPU:
		why += "So the target leaves room for little else: " +
			"the kernel's share is the copy of each byte off the socket, and the hash itself only moves off this process " +
			"(to a machine with a faster SHA-256, or to the client, whose hash ferry cannot trust)."
	case hashCPU > 0:
		// The verdict turns on the machine's SHA-256 more than on ferry:
		// say how slow a hash the same receive cost leaves room for.
		budget := targetTotalCPU - fu.ControlCPUPerGiB - (fu.BackgroundCPUPerGiB - hashCPU)
		if budget > 0 {
			why += fmt.Sprintf("With the same control plane and receive, the target holds on a machine whose SHA-256 takes under %.2f s per GiB (%.2f GB/s or faster).",
				budget, gib/1e9/budget)
		}
	}
	v5.Why = append(v5.Why, why)
	return []verdict{v1, v2, v3, v4, v5}
}

// digestName is how the report names the digest `ferry download` checked
// its file with (its checked_by).
func digestName(checkedBy string) string {
	if checkedBy == "crc32c" {
		return "the CRC32C ferry sends in Repr-Digest"
	}
	return "SHA-256"
}

// phasesTable splits the ferry upload and download into their phases.
func (rp report) phasesTable() string {
	var b strings.Builder
	fu := rp.summarise(caseFerryUpload)
	dl := rp.summarise(caseFerryDownload).Checksum
	own := "SHA-256" // the digest the CLI takes itself, to compare with digestName's
	if dl == "crc32c" {
		own = "CRC32C"
	}
	what := map[string]string{
		"setup":    "from the CLI's start to its first part PUT: `POST /uploads`, and whatever the client reads before sending",
		"transfer": "presign calls and part PUTs straight to S3, until S3 has answered the last one",
		"finish":   fmt.Sprintf("the last PUT's answer, `complete`, the merge job (%.2f s, with S3's CompleteMultipartUpload), until ferry records success", fu.MergeSeconds),
		"sha256": fmt.Sprintf("after success, in the background: the verify job reads the object back through SHA-256 (%.2f s in the job); the client has its answer already",
			fu.VerifySeconds),
		"download": "the proxied GET, S3 → `ferry serve` → CLI → file",
		"verify":   fmt.Sprintf("the CLI compares the %s it took while writing with %s, and renames the file", own, digestName(dl)),
	}
	header := func(kind string) {
		fmt.Fprintf(&b, "| %s phase | what happens | wall s | `ferry serve` CPU s/GiB | `ferry serve` bytes read/GiB | CLI CPU s/GiB | S3 CPU s/GiB | cores busy |\n", kind)
		b.WriteString("|---|---|--:|--:|--:|--:|--:|--:|\n")
	}
	row := func(p phaseSummary, name string) {
		fmt.Fprintf(&b, "| %s | %s | %.2f | %.3f | %.1f MiB | %.2f | %.2f | %.2f |\n",
			p.Name, what[name], p.Wall, p.ServerCPU, p.ServerReadMB, p.ClientCPU, p.S3CPU, p.Busy)
	}
	header("ferry upload")
	for _, p := range fu.Phases {
		row(p, p.Name)
	}
	fd := rp.summarise(caseFerryDownload)
	if len(fd.Phases) > 0 {
		b.WriteString("\n")
		header("ferry download")
		for _, p := range fd.Phases {
			name := p.Name
			if name == "transfer" {
				name = "download"
			}
			row(p, name)
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
	switch {
	case m.SHA256EndGBps > 0:
		fmt.Fprintf(&b, "| SHA-256 | %.2f GB/s on one core (crypto/sha256, a 4 MiB buffer hashed 64 times, best of 3 on the thread's CPU clock: %.2f at the start, %.2f at the end) |\n",
			m.sha256Best(), m.SHA256GBps, m.SHA256EndGBps)
	case m.SHA256GBps > 0:
		fmt.Fprintf(&b, "| SHA-256 | %.2f GB/s on one core (crypto/sha256 over 64 MiB in memory, best of 3, at the start) |\n", m.SHA256GBps)
	}
	fmt.Fprintf(&b, "| Load average (1, 5, 15 min) at start | %s |\n| Load average at end | %s |\n", m.LoadStart, m.LoadEnd)
	fmt.Fprintf(&b, "| ferry | code at `%s`, database: %s, part size %s, client concurrency %d |\n", rp.Commit, rp.DB, formatSize(rp.Info.PartSize), rp.Info.Concurrency)
	fmt.Fprintf(&b, "| S3 | VersityGW %s, standalone process, POSIX backend on the local disk, keep-alive on |\n", versityTool().version)
	fmt.Fprintf(&b, "| tusd | %s, S3 store with its defaults (50 MiB parts, 10 part uploads at once, MD5 and SHA-256 of each part), ", tusdTool().version)
	if rp.Info.TusChunk > 0 {
		fmt.Fprintf(&b, "PATCH chunks of %s |\n", formatSize(rp.Info.TusChunk))
	} else {
		b.WriteString("the whole file in one PATCH |\n")
	}
	fmt.Fprintf(&b, "| raw SDK | aws-sdk-go-v2, hand-written parallel multipart: %s parts, %d at once, UNSIGNED-PAYLOAD; the ceiling with no checksums, "+
		"and the ceiling with integrity: a FULL_OBJECT CRC32C upload, each part with its x-amz-checksum-crc32c, the whole file's CRC32C at complete (combined from the parts', no second read) |\n",
		formatSize(rp.Info.PartSize), rp.Info.Concurrency)
	if aws := rp.summarise(caseAWSCLIUpload); aws.Runs > 0 {
		fmt.Fprintf(&b, "| AWS CLI | %s: `aws s3 cp` with multipart_chunksize %s and max_concurrent_requests %d, its other settings (checksums included) left at their defaults |\n",
			aws.Tool, formatSize(rp.Info.PartSize), rp.Info.Concurrency)
	} else {
		b.WriteString("| AWS CLI | not on PATH, so `aws s3 cp` was left out (Debian: `apt-get install awscli`) |\n")
	}
	b.WriteString("\n")

	b.WriteString("## Results\n\n")
	if rp.Info.Runs > 1 {
		fmt.Fprintf(&b, "Medians of %d runs; × ceiling is the median of the ratios within each run. Every run is listed below.\n\n", rp.Info.Runs)
	}
	if rp.Info.Warmup > 0 {
		fmt.Fprintf(&b, "Every case ran %s first, not counted: fresh peers pay one-off costs in their first round.\n\n", plural(rp.Info.Warmup, "warm-up round"))
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
- **CPU** is each process's time on a CPU, user and kernel: the sum over its threads of the scheduler's nanosecond
  count (` + "`/proc/<pid>/task/*/schedstat`" + `), or utime+stime from ` + "`/proc/<pid>/stat`" + ` (10 ms ticks) when threads
  have exited since it started; the kernel's share is stime. It is read just before and just after each case, for the
  API server (` + "`ferry serve`" + `, tusd), for VersityGW, and for the client (the CLI process; the bench process itself
  for the in-process SDK and tus clients; the ` + "`aws`" + ` process and its children). For ` + "`ferry upload`" + `, all three are also read
  at its first part PUT and when S3 has answered its last part PUT (from its ` + "`--json`" + ` progress), at its success line
  (the CLI long-polls the upload, and ferry answers at the moment it records success; the bench asks ferry nothing before
  then, so the control plane's CPU is the client's requests and the merge alone), and when the file's SHA-256 is verified
  (the bench polls the file every 100 ms). The case's wall time ends when the CLI exits; the verify job after success is
  the "sha256" phase. The bench's own requests after success (one lookup, the file polls) are left out of the request
  counts. "Cores busy" is the CPU of all three over the wall time.
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

// overUnder says how d seconds stand against a reference: "0.02 s over",
// or "0.34 s under" where a plain difference would read "-0.34 s over".
func overUnder(d float64) string {
	if d < 0 {
		return fmt.Sprintf("%.2f s under", -d)
	}
	return fmt.Sprintf("%.2f s over", d)
}

// plural is n and noun, with an s unless n is 1.
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}
