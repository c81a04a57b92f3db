package server_test

import (
	"fmt"
	"testing"

	"github.com/ferry-io/ferry/internal/testenv"
	"github.com/ferry-io/ferry/models"
	"github.com/ferry-io/ferry/s3store"
)

// BenchmarkPresign1000Parts measures one POST /uploads/{id}/presign that
// signs 1,000 part URLs, through the whole HTTP stack: for a sized upload
// (each URL signs its Content-Length), and for one with CRC32C checksums
// (each URL also signs its part's x-amz-checksum-crc32c). Target: 20 ms.
func BenchmarkPresign1000Parts(b *testing.B) {
	for _, dialect := range []string{models.SQLite, models.MySQL} {
		for _, checksum := range []string{"", "CRC32C"} {
			name := dialect
			if checksum != "" {
				name += "/" + checksum
			}
			b.Run(name, func(b *testing.B) {
				a := newAPI(b, testenv.NewDB(b, dialect))
				tok := a.user("bench")
				init := map[string]any{"file_name": "big", "size": 2000 * 5 * mib, "part_size": 5 * mib}
				if checksum != "" {
					init["checksum_algorithm"] = checksum
				}
				r := a.do("POST", "/uploads", tok, init)
				if r.Status != 201 {
					b.Fatalf("init: %d %s", r.Status, r.Body)
				}
				if got := r.json(b)["checksum_algorithm"]; checksum != "" && got != checksum {
					b.Fatalf("checksum_algorithm = %v, want %s", got, checksum)
				}
				id := r.json(b)["upload_id"].(string)
				nums := make([]int, 1000)
				crcs := map[string]string{}
				for i := range nums {
					nums[i] = i + 1
					crcs[fmt.Sprint(i+1)] = s3store.EncodeCRC32C(uint32(i) * 2654435761)
				}
				body := map[string]any{"part_numbers": nums}
				if checksum != "" {
					body["checksum_crc32c"] = crcs
				}
				b.ResetTimer()
				for b.Loop() {
					r := a.do("POST", "/uploads/"+id+"/presign", tok, body)
					if r.Status != 200 {
						b.Fatalf("presign: %d %s", r.Status, r.Body)
					}
				}
				b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N)/1000, "µs/url")
			})
		}
	}
}

// BenchmarkInitComplete measures what ferry adds per upload: POST /uploads
// (CreateMultipartUpload + insert) and POST /uploads/{id}/complete
// (ListParts + a transaction that enqueues the merge). The part's PUT to
// S3 is not timed.
func BenchmarkInitComplete(b *testing.B) {
	for _, dialect := range []string{models.SQLite, models.MySQL} {
		b.Run(dialect, func(b *testing.B) {
			a := newAPI(b, testenv.NewDB(b, dialect))
			tok := a.user("bench")
			data := []byte("one small part")
			i := 0
			for b.Loop() {
				i++
				r := a.do("POST", "/uploads", tok, map[string]any{"file_name": fmt.Sprint("f", i), "size": len(data)})
				if r.Status != 201 {
					b.Fatalf("init: %d %s", r.Status, r.Body)
				}
				id := r.json(b)["upload_id"].(string)
				b.StopTimer()
				urls := a.do("POST", "/uploads/"+id+"/presign", tok, map[string]any{"part_numbers": []int{1}}).json(b)["urls"].(map[string]any)
				putPart(b, urls["1"].(map[string]any), data)
				b.StartTimer()
				if r := a.do("POST", "/uploads/"+id+"/complete", tok, nil); r.Status != 202 {
					b.Fatalf("complete: %d %s", r.Status, r.Body)
				}
			}
		})
	}
}

// BenchmarkPresignSmallBatch is what a client hashing while it sends pays
// per request: a presign of 4 parts with their CRC32Cs, on SQLite. Its
// fixed cost (authentication, loading the upload, the access log) is most
// of ferry's CPU per GiB uploaded.
func BenchmarkPresignSmallBatch(b *testing.B) {
	a := newAPI(b, testenv.NewDB(b, models.SQLite))
	tok := a.user("bench")
	r := a.do("POST", "/uploads", tok, map[string]any{"file_name": "big", "size": 2000 * 5 * mib, "part_size": 5 * mib, "checksum_algorithm": "CRC32C"})
	id := r.json(b)["upload_id"].(string)
	body := map[string]any{"part_numbers": []int{1, 2, 3, 4}, "checksum_crc32c": map[string]string{
		"1": s3store.EncodeCRC32C(1), "2": s3store.EncodeCRC32C(2), "3": s3store.EncodeCRC32C(3), "4": s3store.EncodeCRC32C(4)}}
	b.ResetTimer()
	for b.Loop() {
		if r := a.do("POST", "/uploads/"+id+"/presign", tok, body); r.Status != 200 {
			b.Fatalf("presign: %d %s", r.Status, r.Body)
		}
	}
}
