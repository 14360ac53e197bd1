set -e
cd /workspace
printf '#!/bin/bash\necho "Hello, World!"\n' > run.sh
