// Validates a glTF with the Khronos glTF-Validator (npm gltf-validator); prints its issues as JSON.
// Used by tests/io/test_gltf_validator.py: NODE_PATH=.../node_modules node validate_gltf.js FILE.
const fs = require('fs');
const path = require('path');
const validator = require('gltf-validator');
const file = process.argv[2];
const folder = path.dirname(file);
validator.validateBytes(new Uint8Array(fs.readFileSync(file)), {
  uri: path.basename(file),
  maxIssues: 100,
  externalResourceFunction: (uri) => new Promise((resolve, reject) => {
    fs.readFile(path.join(folder, decodeURIComponent(uri)), (err, data) => err ? reject(err.toString()) : resolve(new Uint8Array(data)));
  }),
}).then((report) => { console.log(JSON.stringify(report.issues)); }).catch((e) => { console.error(String(e)); process.exit(3); });
