package main

import (
	"fmt"
	"image/color"
	"os"
	"slices"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/text"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// Colours: ferry stands out, the ceilings are grey, tusd is the peer.
var (
	colorFerry   = color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff}
	colorCeiling = color.RGBA{R: 0x99, G: 0x99, B: 0x99, A: 0xff}
	colorTusd    = color.RGBA{R: 0xff, G: 0x7f, B: 0x0e, A: 0xff}
	colorAWSCLI  = color.RGBA{R: 0x2c, G: 0xa0, B: 0x2c, A: 0xff}
	colorTarget  = color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff}
	// colorReference marks a reference point that is not a ceiling.
	colorReference = color.RGBA{R: 0xc7, G: 0xc7, B: 0xc7, A: 0xff}
)

// bar is one labelled bar of a chart.
type bar struct {
	name  string
	value float64
	label string
	color color.Color
}

// chart draws two horizontal bar charts, one above the other: throughput
// of every case, and the API server's CPU per GiB.
func (rp report) chart(path string) error {
	var speed []bar
	for _, c := range rp.cases() {
		s := rp.summarise(c)
		col := colorFerry
		switch c {
		case caseSDKUpload, caseSDKUploadCRC32, caseS3Get:
			col = colorCeiling
		case caseSDKUploadMD5:
			col = colorReference
		case caseTusdUpload:
			col = colorTusd
		case caseAWSCLIUpload:
			col = colorAWSCLI
		}
		speed = append(speed, bar{name: plainTitle(c), value: s.MiBps, label: fmt.Sprintf("%.0f MiB/s", s.MiBps), color: col})
	}
	fu, tu, fd := rp.summarise(caseFerryUpload), rp.summarise(caseTusdUpload), rp.summarise(caseFerryDownload)
	control, total := fu.ControlCPUPerGiB, fu.ControlCPUPerGiB+fu.BackgroundCPUPerGiB
	cpu := []bar{
		{name: "ferry upload: control plane", value: control, label: fmt.Sprintf("%.3f s", control), color: colorFerry},
		{name: "ferry upload: + background SHA-256", value: total, label: fmt.Sprintf("%.3f s", total), color: colorFerry},
		{name: "tusd upload", value: tu.CPUPerGiB, label: fmt.Sprintf("%.3f s", tu.CPUPerGiB), color: colorTusd},
		{name: "ferry download (proxy)", value: fd.CPUPerGiB, label: fmt.Sprintf("%.3f s", fd.CPUPerGiB), color: colorFerry},
	}

	top, err := barPlot(fmt.Sprintf("Throughput, %s random file, same S3 server (higher is better)", formatSize(rp.Info.Size)), "MiB/s", speed, 0)
	if err != nil {
		return err
	}
	bottom, err := barPlot("API-server CPU per GiB moved (lower is better)",
		fmt.Sprintf("CPU seconds per GiB (dashed: the control-plane target, %.2f s)", targetControlCPU), cpu, targetControlCPU)
	if err != nil {
		return err
	}

	const w, h = 26 * vg.Centimeter, 22 * vg.Centimeter
	img := vgimg.NewWith(vgimg.UseWH(w, h), vgimg.UseDPI(110), vgimg.UseBackgroundColor(color.White))
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: 2, Cols: 1, PadTop: vg.Points(8), PadBottom: vg.Points(8), PadLeft: vg.Points(8), PadRight: vg.Points(16), PadY: vg.Points(18)}
	canvases := plot.Align([][]*plot.Plot{{top}, {bottom}}, tiles, dc)
	top.Draw(canvases[0][0])
	bottom.Draw(canvases[1][0])

	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// barPlot is a horizontal bar chart with the value written past each bar,
// the first bar on top, and a dashed vertical line at target when > 0.
func barPlot(title, unit string, bars []bar, target float64) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = unit
	p.Title.TextStyle.Font.Size = vg.Points(12)
	p.X.Min = 0
	// Draw from the bottom up so the list reads top-down like the table.
	bars = slices.Clone(bars)
	slices.Reverse(bars)
	names := make([]string, len(bars))
	maxV := target
	var xys plotter.XYs
	var labels []string
	for i, b := range bars {
		names[i] = b.name
		maxV = max(maxV, b.value)
		bc, err := plotter.NewBarChart(plotter.Values{b.value}, vg.Points(22))
		if err != nil {
			return nil, err
		}
		bc.Horizontal = true
		bc.XMin = float64(i)
		bc.Color = b.color
		bc.LineStyle.Width = 0
		p.Add(bc)
		xys = append(xys, plotter.XY{X: b.value, Y: float64(i)})
		labels = append(labels, b.label)
	}
	lbl, err := plotter.NewLabels(plotter.XYLabels{XYs: xys, Labels: labels})
	if err != nil {
		return nil, err
	}
	for i := range lbl.TextStyle {
		lbl.TextStyle[i].XAlign = text.XLeft
		lbl.TextStyle[i].YAlign = text.YCenter
		lbl.TextStyle[i].Font.Size = vg.Points(10)
	}
	lbl.Offset = vg.Point{X: vg.Points(4)}
	p.Add(lbl)
	if target > 0 {
		line, err := plotter.NewLine(plotter.XYs{{X: target, Y: -0.5}, {X: target, Y: float64(len(bars)) - 0.5}})
		if err != nil {
			return nil, err
		}
		line.Color = colorTarget
		line.Width = vg.Points(1.5)
		line.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
		p.Add(line)
	}
	p.NominalY(names...)
	p.X.Max = maxV * 1.3 // room for the labels
	p.Y.Tick.Label.Font.Size = vg.Points(10)
	p.Add(plotter.NewGrid())
	return p, nil
}

// plainTitle is a case's title without markdown.
func plainTitle(c string) string {
	t := []rune(caseTitle(c))
	out := t[:0]
	for _, r := range t {
		if r != '`' {
			out = append(out, r)
		}
	}
	return string(out)
}
