// A Chromium that Playwright attaches to only between the legs of a
// benchmark. Playwright tracks every request of the pages and workers it
// is attached to (an in-memory request body included), which a user's
// browser never does; a leg started and then left alone measures
// Chromium, not the harness.

import { spawn } from 'node:child_process'
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { chromium } from 'playwright-core'

// launchDetached starts Chromium with a DevTools port and a fresh
// profile. connect attaches Playwright and returns the browser (close()
// detaches and leaves Chromium running) and its first page; titled waits,
// without attaching, until a page's title is title.
export async function launchDetached(executablePath) {
  const profile = mkdtempSync(join(tmpdir(), 'ferry-chromium-'))
  const proc = spawn(executablePath, ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic',
    '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync',
    '--remote-debugging-port=0', '--user-data-dir=' + profile, 'about:blank'], { stdio: ['ignore', 'ignore', 'pipe'], detached: true })
  const devtools = await new Promise((resolve, reject) => {
    let err = ''
    const timer = setTimeout(() => reject(new Error('Chromium printed no DevTools address:\n' + err)), 30000)
    proc.stderr.on('data', (c) => {
      err += c
      const m = /DevTools listening on ws:\/\/([^/\s]+)\//.exec(err)
      if (m) {
        clearTimeout(timer)
        resolve('http://' + m[1])
      }
    })
  })
  return {
    pid: proc.pid,
    profile,
    async connect() {
      const browser = await chromium.connectOverCDP(devtools)
      const context = browser.contexts()[0]
      return { browser, context, page: context.pages()[0] || await context.newPage() }
    },
    // The DevTools HTTP endpoint lists the targets and their titles;
    // reading it attaches to nothing.
    async titled(title, timeoutMs) {
      const deadline = Date.now() + timeoutMs
      while (Date.now() < deadline) {
        const targets = await (await fetch(devtools + '/json/list')).json()
        if (targets.some((t) => t.type === 'page' && t.title === title)) return
        await new Promise((resolve) => setTimeout(resolve, 100))
      }
      throw new Error(`no page was titled ${title} within ${timeoutMs} ms`)
    },
    // close stops Chromium and, once it has exited (it writes to its
    // profile until then), removes the profile. Chromium runs in a process
    // group of its own (detached above) and the whole group is stopped:
    // a helper that outlived the browser process went on writing to the
    // profile while it was being removed, and the removal failed.
    async close() {
      if (proc.exitCode === null && proc.signalCode === null) {
        const exited = new Promise((resolve) => proc.once('exit', resolve))
        process.kill(-proc.pid, 'SIGTERM')
        await exited
      }
      try {
        process.kill(-proc.pid, 'SIGKILL')
      } catch {} // the group is gone already
      rmSync(profile, { recursive: true, force: true, maxRetries: 10, retryDelay: 200 })
    },
  }
}

// setFiles chooses files in the input that selector finds on page through
// DOM.setFileInputFiles, which hands Chromium the paths: Playwright's
// setInputFiles refuses files over 50 MB for a browser it did not launch.
export async function setFiles(context, page, selector, files) {
  const cdp = await context.newCDPSession(page)
  try {
    const { root } = await cdp.send('DOM.getDocument')
    const { nodeId } = await cdp.send('DOM.querySelector', { nodeId: root.nodeId, selector })
    if (!nodeId) throw new Error('no ' + selector + ' on the page')
    await cdp.send('DOM.setFileInputFiles', { nodeId, files })
  } finally {
    await cdp.detach()
  }
}
