package server_test

import (
	"fmt"
	"testing"

	"github.com/ferry-io/ferry/internal/testenv"
	"github.com/ferry-io/ferry/models"
)

// BenchmarkPresign1000Parts measures one POST /uploads/{id}/presign that
// signs 1,000 part URLs, through the whole HTTP stack.
func BenchmarkPresign1000Parts(b *testing.B) {
	for _, dialect := range []string{models.SQLite, models.MySQL} {
		b.Run(dialect, func(b *testing.B) {
			a := newAPI(b, testenv.NewDB(b, dialect))
			tok := a.user("bench")
			r := a.do("POST", "/uploads", tok, map[string]any{"file_name": "big", "size": 2000 * 5 * mib, "part_size": 5 * mib})
			id := r.json(b)["upload_id"].(string)
			nums := make([]int, 1000)
			for i := range nums {
				nums[i] = i + 1
			}
			body := map[string]any{"part_numbers": nums}
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
