// A self-signed certificate for localhost and 127.0.0.1, made by openssl in a temporary
// directory for each test file (no private key is kept in the repository).

import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { tempDir } from './processes.ts';

export interface TestCertificate {
  cert: Buffer;
  key: Buffer;
  certFile: string;
  keyFile: string;
}

export function makeCertificate(t: { teardown(fn: () => unknown): void }): TestCertificate {
  const dir = tempDir(t, 'tls');
  const certFile = join(dir, 'cert.pem');
  const keyFile = join(dir, 'key.pem');
  execFileSync(
    'openssl',
    [
      'req',
      '-x509',
      '-newkey',
      'ec',
      '-pkeyopt',
      'ec_paramgen_curve:prime256v1',
      '-nodes',
      '-days',
      '1',
      '-subj',
      '/CN=localhost',
      '-addext',
      'subjectAltName=DNS:localhost,IP:127.0.0.1',
      '-keyout',
      keyFile,
      '-out',
      certFile,
    ],
    { stdio: 'ignore' },
  );
  return { cert: readFileSync(certFile), key: readFileSync(keyFile), certFile, keyFile };
}
