"""The OpenAPI document tjob serve serves: valid OpenAPI 3 (checked by an independent validator, from npm), and
every operation it lists answers as it says, with bodies of the shapes it gives."""
import json
import os
import shutil
import subprocess

from conftest import HELPER, DEADLINE, unavailable

NODE_TOOLS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "node")
VALIDATOR = os.path.join(NODE_TOOLS, "node_modules", "@seriousme", "openapi-schema-validator", "bin",
                         "validate-api-cli.js")


def test_the_document_is_valid_openapi_3(server, tmp_path):
    if not shutil.which("node") or not os.path.exists(VALIDATOR):
        unavailable("node and tests/serve/node's packages (scripts/setup runs npm ci there)")
    doc = server.get("/v1/openapi.json")
    assert doc.status == 200
    path = tmp_path / "openapi.json"
    path.write_text(doc.body)
    out = subprocess.run(["node", VALIDATOR, str(path)], capture_output=True, text=True, timeout=DEADLINE)
    verdict = json.loads(out.stdout)
    assert verdict == {"valid": True}, out.stdout
    # and the validator does refuse a broken one (so "valid" above means something)
    broken = json.loads(doc.body)
    del broken["info"]["title"]
    path.write_text(json.dumps(broken))
    out = subprocess.run(["node", VALIDATOR, str(path)], capture_output=True, text=True, timeout=DEADLINE)
    assert json.loads(out.stdout)["valid"] is False


class Schemas:
    """Checks a JSON value against the document's schemas (the OpenAPI 3.0 subset it uses)."""

    def __init__(self, doc):
        self.doc = doc

    def resolve(self, schema):
        while "$ref" in schema:
            node = self.doc
            for part in schema["$ref"].lstrip("#/").split("/"):
                node = node[part]
            schema = node
        return schema

    def check(self, value, schema, where="$"):
        schema = self.resolve(schema)
        if value is None:
            assert schema.get("nullable"), where + " is null, which the document does not allow"
            return
        if "oneOf" in schema:
            matches = 0
            for option in schema["oneOf"]:
                try:
                    self.check(value, option, where)
                    matches += 1
                except AssertionError:
                    pass
            assert matches == 1, where + " matches %d of oneOf" % matches
            return
        if "allOf" in schema:
            for option in schema["allOf"]:
                self.check(value, option, where)
        kinds = {"object": dict, "array": list, "string": str, "boolean": bool, "number": (int, float)}
        t = schema.get("type")
        if t == "integer":
            assert isinstance(value, int) and not isinstance(value, bool), where + " is not an integer"
        elif t:
            assert isinstance(value, kinds[t]), "%s is not a %s: %r" % (where, t, value)
        if "enum" in schema:
            assert value in schema["enum"], "%s=%r is not one of %r" % (where, value, schema["enum"])
        if t == "object":
            for key in schema.get("required", []):
                assert key in value, "%s has no %s" % (where, key)
            props = schema.get("properties", {})
            extra = schema.get("additionalProperties", True)
            for key, v in value.items():
                if key in props:
                    self.check(v, props[key], where + "." + key)
                elif extra is False:
                    raise AssertionError("%s has %s, which the document does not list" % (where, key))
                elif isinstance(extra, dict):
                    self.check(v, extra, where + "." + key)
        if t == "array":
            for i, v in enumerate(value):
                self.check(v, schema.get("items", {}), "%s[%d]" % (where, i))


def test_every_operation_answers_as_the_document_says(server):
    doc = server.get("/v1/openapi.json").json()
    schemas = Schemas(doc)
    server.submit([HELPER, "print", "hi\n"], name="doc")
    server.wait("doc")
    sweep = {"trial": {"trainer": {"kind": "command", "command": [HELPER, "print", "loss=${trialParameters.x}\n"]}},
             "search_space": [{"name": "x", "distribution": "uniform", "min": 0, "max": 1}], "num_trials": 2}
    assert server.post("/v1/sweeps", dict(sweep, name="docsweep")).status == 201
    params = {"name": "doc"}
    # one call per operation, with what the document says it takes; the deleting one last
    calls = []
    for path, item in doc["paths"].items():
        for method, op in item.items():
            if method == "parameters":
                continue
            named = {"/v1/runtimes": "torch-distributed", "/v1/sweeps": "docsweep"}
            url = path.replace("{name}", next((v for k, v in named.items() if path.startswith(k)), params["name"]))
            body = None
            if method == "post" and path == "/v1/jobs":
                body = {"name": "doc2", "trainer": {"kind": "command", "command": [HELPER, "exit", "0"]}}
            if method == "post" and path == "/v1/sweeps":
                body = dict(sweep, name="docsweep2")
            calls.append((method, path, url, body, op))
    calls.sort(key=lambda c: c[0] == "delete")
    assert len(calls) == 22, [c[:2] for c in calls]
    for method, path, url, body, op in calls:
        if path == "/v1/watch":
            c = server.conn()
            c.request("GET", url)
            r = c.getresponse()
            assert str(r.status) in op["responses"]
            assert r.getheader("Content-Type") in op["responses"][str(r.status)]["content"]
            line = json.loads(r.readline())
            schemas.check(line, op["responses"]["200"]["content"]["application/x-ndjson"]["schema"])
            c.close()
            continue
        r = server.request(method.upper(), url, body=body)
        assert str(r.status) in op["responses"], "%s %s answered %d, which the document does not list" % (
            method, url, r.status)
        content = op["responses"][str(r.status)].get("content", {})
        ctype = r.headers["Content-Type"].split(";")[0]
        assert ctype in content, (method, url, ctype)
        if ctype == "application/json":
            schemas.check(json.loads(r.body), content[ctype]["schema"], "%s %s" % (method.upper(), url))
    # the errors have the document's shape too, and an unknown route is not one of its paths
    for bad in ["/v1/jobs/nope", "/v1/nothing", "/v1/jobs?limit=x", "/v1/sweeps/nope"]:
        r = server.get(bad)
        assert r.status in (400, 404)
        schemas.check(r.json(), {"$ref": "#/components/schemas/Error"})
    spec = doc["components"]["schemas"]["JobSpec"]
    schemas.check({"name": "x", "trainer": {"kind": "command", "command": ["true"]}}, spec)
