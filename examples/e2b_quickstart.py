"""A script written for E2B's hosted service, unchanged.

Run it against SPACE by changing only the environment:

    export E2B_API_URL=http://127.0.0.1:8080      # SPACE's base URL
    export E2B_SANDBOX_URL=http://127.0.0.1:8080  # the same URL
    export E2B_API_KEY=sk_...                     # a SPACE key: `space keys create --org me`
    python examples/e2b_quickstart.py
"""

from e2b import CommandExitException, Sandbox

with Sandbox.create(metadata={"example": "quickstart"}) as sandbox:
    result = sandbox.commands.run("echo 'Hello from the sandbox' && uname -s")
    print(result.stdout, end="")

    sandbox.files.write("/home/user/hello.py", "print(sum(range(10)))\n")
    print("python says", sandbox.commands.run("python3 /home/user/hello.py").stdout, end="")
    print("files:", [entry.name for entry in sandbox.files.list("/home/user")])

    try:
        sandbox.commands.run("exit 3")
    except CommandExitException as error:
        print("failing command exited with", error.exit_code)

    sandbox.commands.run(
        "for i in 1 2 3; do echo tick $i; sleep 0.2; done",
        on_stdout=lambda line: print("streamed:", line, end=""),
    )
