"""Merges CTest JUnit reports into one: every test case of every input under
one <testsuite>, its counts summed. Used by scripts/test.sh, whose test passes
each write a report, so that .ci/run reads one file per stage.
    python3 scripts/junit-merge.py OUT.xml IN.xml...
"""
import sys
import xml.etree.ElementTree as ET


def main(out, inputs):
    merged = None
    for path in inputs:
        suite = ET.parse(path).getroot()
        if suite.tag != "testsuite":
            sys.exit(f"junit-merge: {path}: the root is <{suite.tag}>, not <testsuite>")
        if merged is None:
            merged = suite
            continue
        for key in ("tests", "failures", "disabled", "skipped", "errors"):
            if key in suite.attrib:
                merged.set(key, str(int(merged.get(key, "0")) + int(suite.get(key))))
        if "time" in suite.attrib:
            merged.set("time", str(float(merged.get("time", "0")) + float(suite.get("time"))))
        for case in suite.findall("testcase"):
            merged.append(case)
    if merged is None:
        sys.exit("junit-merge: no input report")
    ET.ElementTree(merged).write(out, encoding="UTF-8", xml_declaration=True)


if __name__ == "__main__":
    if len(sys.argv) < 3:
        sys.exit("usage: python3 scripts/junit-merge.py OUT.xml IN.xml...")
    main(sys.argv[1], sys.argv[2:])
