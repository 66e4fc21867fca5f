// The kvshrink binary and model the node tests run (KVSHRINK_BIN, KVSHRINK_MODEL, set by
// tests.cmake) and a server on a free loopback port, shared by every *.test.mjs here.
import { spawn } from 'node:child_process';

export const BIN = process.env.KVSHRINK_BIN;
export const MODEL = process.env.KVSHRINK_MODEL;

// Starts a server with `extra` flags; resolves with { proc, url } once it prints the port it listens on.
export function startServer(extra = []) {
  return new Promise((resolve, reject) => {
    const args = ['serve', '-m', MODEL, '--port', '0', '-t', '2', '--ctx-size', '1024', '--max-tokens', '400', ...extra];
    const proc = spawn(BIN, args, { stdio: ['ignore', 'ignore', 'pipe'] });
    let err = '';
    const timer = setTimeout(() => reject(new Error('server did not start: ' + err)), 30000);
    proc.stderr.on('data', (d) => {
      err += d.toString();
      const m = err.match(/listening on (http:\/\/127\.0\.0\.1:\d+)/);
      if (m) {
        clearTimeout(timer);
        resolve({ proc, url: m[1] });
      }
    });
    proc.on('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`server exited (${code}): ${err}`));
    });
  });
}
