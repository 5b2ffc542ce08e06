import { spawnSync } from 'node:child_process';
import * as path from 'node:path';
import { projectRoot } from '../../src/mapping-files';
import { youngGenerationAdvice } from '../../src/service/heap-growth';

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

describe('youngGenerationAdvice (Node 24 grows the young generation to 128 MB)', () => {
  it('advises a limit on Node 24 and later when neither the command line nor NODE_OPTIONS sets one', () => {
    expect(youngGenerationAdvice('24.21.0', [], '')).toMatch(/NODE_OPTIONS=--max-semi-space-size=16/);
    expect(youngGenerationAdvice('25.0.0', ['--max-old-space-size=512'], '--enable-source-maps')).toMatch(/young generation/);
  });

  it('says nothing once a limit is set, or on Node 20 and 22', () => {
    expect(youngGenerationAdvice('24.21.0', ['--max-semi-space-size=16'], '')).toBeUndefined();
    expect(youngGenerationAdvice('24.21.0', [], '--enable-source-maps --max_semi_space_size=8')).toBeUndefined();
    expect(youngGenerationAdvice('22.23.3', [], '')).toBeUndefined();
    expect(youngGenerationAdvice('20.20.2', [], '')).toBeUndefined();
  });
});
