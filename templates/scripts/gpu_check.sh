#!/bin/sh
# The GPU check in a train or eval container (container mode): --nv on a
# node without a working driver succeeds and binds nothing, so the device
# files must be seen in the container too. Exits 0 when a device file
# matches NEMORL_GPU_DEVICES (cluster.gpu_devices, a glob), else
# NEMORL_NO_GPU_EXIT (stages.ExitNoGPU).
#
# Not staged: the renderer inlines it into the script's exec line as
# `/bin/sh -c '...'` (gpuCheck in render.go): it drops these comment lines,
# joins the other lines with "; " (so each must be a whole command) and
# writes the values in place of "$NEMORL_NO_GPU_EXIT" and
# $NEMORL_GPU_DEVICES. Run as it is, it reads them from the environment.
for d in $NEMORL_GPU_DEVICES; do [ -e "$d" ] && exit 0; done
echo "nemorl: no GPU: no device file matches $NEMORL_GPU_DEVICES in the container after --nv" >&2
exit "$NEMORL_NO_GPU_EXIT"
