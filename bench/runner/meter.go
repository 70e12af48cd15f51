package main

// Metering from /proc: CPU time of a process tree, peak RSS, and how busy each CPU was during a
// cell.

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// tree returns pid and its descendants (nginx's worker).
func tree(pid int) []int {
	pids := []int{pid}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		child, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if ppid(child) == pid {
			pids = append(pids, tree(child)...)
		}
	}
	return pids
}

func statFields(pid int) []string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return nil
	}
	return parseStat(string(b))
}

// parseStat splits a /proc/PID/stat line after the command name, which is
// in parentheses and may itself contain spaces and ')': the result starts
// at field 3 (state), so field N of proc(5) is at index N-3.
func parseStat(s string) []string {
	i := strings.LastIndexByte(s, ')')
	if i < 0 || i+2 > len(s) {
		return nil
	}
	return strings.Fields(s[i+1:])
}

func ppid(pid int) int {
	f := statFields(pid)
	if len(f) < 2 {
		return -1
	}
	n, _ := strconv.Atoi(f[1])
	return n
}

// cpuTicks is utime+stime of the process tree, in clock ticks (1/100 s).
func cpuTicks(pids []int) int64 {
	var t int64
	for _, pid := range pids {
		f := statFields(pid)
		if len(f) < 13 {
			continue
		}
		u, _ := strconv.ParseInt(f[11], 10, 64) // field 14 utime
		s, _ := strconv.ParseInt(f[12], 10, 64) // field 15 stime
		t += u + s
	}
	return t
}

const clkTck = 100 // sysconf(_SC_CLK_TCK) on Linux

func statusKB(pids []int, key string) int64 {
	var kb int64
	for _, pid := range pids {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
		if err != nil {
			continue
		}
		kb += parseStatusKB(string(b), key)
	}
	return kb
}

// parseStatusKB returns the value in kB of key ("VmHWM", "VmRSS") in a
// /proc/PID/status file, 0 when absent.
func parseStatusKB(status, key string) int64 {
	for line := range strings.SplitSeq(status, "\n") {
		if v, ok := strings.CutPrefix(line, key+":"); ok {
			n, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return n
		}
	}
	return 0
}

// resetPeak resets VmHWM (peak RSS) to the current RSS.
func resetPeak(pids []int) {
	for _, pid := range pids {
		_ = os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", pid), []byte("5"), 0)
	}
}

// cpuBusy returns busy and total jiffies of each CPU from /proc/stat.
func cpuBusy() map[string][2]int64 {
	b, _ := os.ReadFile("/proc/stat")
	return parseCPUBusy(string(b))
}

// parseCPUBusy reads the per-CPU lines of /proc/stat ("cpu0 user nice
// system idle iowait irq softirq steal ..."): busy = total - idle - iowait
// over the first eight columns (guest time is already in user and nice).
// Keys are the CPU numbers ("0", "1"); the aggregate "cpu" line is skipped.
func parseCPUBusy(stat string) map[string][2]int64 {
	m := map[string][2]int64{}
	for line := range strings.SplitSeq(stat, "\n") {
		f := strings.Fields(line)
		if len(f) < 8 || !strings.HasPrefix(f[0], "cpu") || f[0] == "cpu" {
			continue
		}
		var total, idle int64
		for i, v := range f[1:] {
			n, _ := strconv.ParseInt(v, 10, 64)
			if i < 8 {
				total += n
			}
			if i == 3 || i == 4 { // idle, iowait
				idle += n
			}
		}
		m[strings.TrimPrefix(f[0], "cpu")] = [2]int64{total - idle, total}
	}
	return m
}

// meter measures one cell on a process tree.
type meter struct {
	pids, originPids []int
	ticks, oTicks    int64
	cpus             map[string][2]int64
	t0               time.Time
}

func (r *runner) begin(p *proc) *meter {
	m := &meter{pids: tree(p.cmd.Process.Pid), originPids: tree(r.origin.cmd.Process.Pid)}
	resetPeak(m.pids)
	m.ticks, m.oTicks, m.cpus, m.t0 = cpuTicks(m.pids), cpuTicks(m.originPids), cpuBusy(), time.Now()
	return m
}

func (m *meter) end(c *cell) {
	ticks := cpuTicks(m.pids) - m.ticks
	oTicks := cpuTicks(m.originPids) - m.oTicks
	cpus := cpuBusy()
	if c.requests > 0 {
		c.cpuUS = float64(ticks) * 1e6 / clkTck / float64(c.requests)
		c.originUS = float64(oTicks) * 1e6 / clkTck / float64(c.requests)
	}
	c.peakMiB = float64(statusKB(m.pids, "VmHWM")) / 1024
	busy := func(cpu string) float64 {
		a, b := m.cpus[cpu], cpus[cpu]
		if b[1] == a[1] {
			return 0
		}
		return 100 * float64(b[0]-a[0]) / float64(b[1]-a[1])
	}
	c.busy0, c.busy1 = busy(proxyCPU), busy(loadCPU)
}
