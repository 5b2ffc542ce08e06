import { spawnSync } from 'node:child_process';
import * as path from 'node:path';
import { projectRoot } from '../../src/mapping-files';

/** Runs keepHeapNearLive in a Node process of its own (it changes a process-wide V8 setting) and says whether it set the factor. */
function setInChild(execArgv: string[] = []): boolean {
  const module = path.join(projectRoot, 'dist', 'service', 'heap-growth.js');
  const child = spawnSync(process.execPath, [...execArgv, '-e', `process.stdout.write(String(require(${JSON.stringify(module)}).keepHeapNearLive()))`], {
    env: { PATH: process.env.PATH },
    encoding: 'utf8',
  });
  expect(child.stderr).toBe('');
  return child.stdout === 'true';
}

describe('keepHeapNearLive (serve keeps its heap near what is live)', () => {
  it('sets the growing factor when the operator has not', () => {
    expect(setInChild()).toBe(true);
    expect(setInChild(['--max-old-space-size=512'])).toBe(true);
  });

  it("leaves an operator's own factor alone", () => {
    expect(setInChild(['--heap-growing-percent=80'])).toBe(false);
    expect(setInChild(['--heap_growing_percent=80'])).toBe(false);
  });
});
