// Typed operations for the kit and its example, generated from the service's SDL and the one
// documents file, plus the manifest of trusted documents the service loads
// (`ENGAGE_TRUSTED_DOCUMENTS`). Run `npm run codegen` after changing either; CI re-runs it and
// fails when the committed output differs.
import { createHash } from 'node:crypto';
import { renameSync } from 'node:fs';
import type { CodegenConfig } from '@graphql-codegen/cli';
import { addTypenameSelectionDocumentTransform } from '@graphql-codegen/client-preset';

const generated = 'src/gql/';

const config: CodegenConfig = {
  schema: '../../schema.graphql',
  documents: ['src/operations.graphql'],
  ignoreNoDocuments: false,
  generates: {
    [generated]: {
      preset: 'client',
      // The documents as Apollo Client sends them: it adds `__typename` to every selection
      // set for its cache, and a trusted document is matched by its exact text.
      documentTransforms: [addTypenameSelectionDocumentTransform],
      presetConfig: {
        fragmentMasking: false,
        persistedDocuments: {
          // The service keys its manifest by the bare SHA-256 hex of each text, the form
          // the APQ extension (`persistedQuery.sha256Hash`) carries too; the preset's own
          // `sha256` would prefix each key with `sha256:`.
          hashAlgorithm: (text: string) => createHash('sha256').update(text).digest('hex'),
        },
      },
      config: {
        scalars: {
          DateTime: { input: 'string', output: 'string' },
          Date: { input: 'string', output: 'string' },
          JSON: { input: 'unknown', output: 'unknown' },
        },
        // Enums as objects with their values, so that code can compare against
        // `ErrorCode.SoldOut` and tell a known code from an unknown one.
        enumType: 'const',
        useTypeImports: true,
      },
    },
    [`${generated}possible-types.ts`]: {
      plugins: ['fragment-matcher'],
      config: { apolloClientVersion: 3, useExplicitTyping: true },
    },
  },
  hooks: {
    // The preset writes its manifest next to the code; the service and CI read it from the
    // kit's root.
    afterOneFileWrite: (path: string) => {
      if (path.endsWith('persisted-documents.json')) renameSync(path, 'persisted-documents.json');
    },
  },
};

export default config;
