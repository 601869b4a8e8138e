// Runs a host through the gateway: `through-gateway.mjs HOST.mjs URL` starts `taskgate serve`
// (the binary in TASKGATE_BIN) with the server at URL as its one upstream (HTTP, tools under
// their own names, every other setting default), runs HOST.mjs against the gateway's endpoint,
// stops the gateway, and exits as the host did. The conformance suite's client scenarios run
// it as their client, so what they check is the gateway's side facing the upstream.
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';

const [hostScript, url] = process.argv.slice(2);
const dir = mkdtempSync(join(tmpdir(), 'taskgate-through-'));
const config = join(dir, 'taskgate.toml');
writeFileSync(
  config,
  [
    '[server]',
    'listen = "127.0.0.1:0"',
    '[store]',
    'backend = "memory"',
    '[[upstream]]',
    'name = "scenario"',
    'transport = "http"',
    `url = ${JSON.stringify(url)}`,
    'prefix = false',
    '',
  ].join('\n'),
);
const gateway = spawn(process.env.TASKGATE_BIN, ['serve', '--config', config], { stdio: ['ignore', 'pipe', 'inherit'] });
let host;
const stop = () => {
  host?.kill('SIGKILL');
  gateway.kill('SIGKILL');
  rmSync(dir, { recursive: true, force: true });
};
// Stopped (the suite's timeout) or left behind (its runner killed): the gateway and the host
// go too.
for (const signal of ['SIGTERM', 'SIGINT', 'SIGHUP']) {
  process.on(signal, () => {
    stop();
    process.exit(1);
  });
}
const parent = process.ppid;
setInterval(() => {
  if (process.ppid !== parent) {
    stop();
    process.exit(1);
  }
}, 500).unref();
// It prints its endpoint once it serves.
const endpoint = await new Promise((resolve, reject) => {
  const lines = createInterface({ input: gateway.stdout });
  lines.once('line', (line) => resolve(line.split(' ').at(-1)));
  gateway.once('exit', (code) => reject(new Error(`taskgate serve exited with ${code} before it served`)));
}).catch((e) => {
  console.error(e.message);
  stop();
  process.exit(1);
});
gateway.stdout.resume();
host = spawn(process.execPath, [hostScript, endpoint], { stdio: 'inherit' });
const code = await new Promise((resolve) => host.once('exit', (c) => resolve(c ?? 1)));
stop();
process.exit(code);
