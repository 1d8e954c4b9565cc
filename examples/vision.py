"""Profile a vision model built offline from a transformers config (ResNet-50 or ViT-Base).

    python examples/vision.py --model resnet50   # batch 8, 224x224
    python examples/vision.py --model vit --batch-size 2
"""

import argparse

from transformers import ResNetConfig, ResNetForImageClassification, ViTConfig, ViTForImageClassification

from flopsight import get_model_profile

MODELS = {
    "resnet50": lambda: ResNetForImageClassification(ResNetConfig()),
    "vit": lambda: ViTForImageClassification(ViTConfig()),
}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=sorted(MODELS), default="resnet50")
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--image-size", type=int, default=224)
    args = parser.parse_args(argv)

    net = MODELS[args.model]()
    flops, macs, params = get_model_profile(
        net,
        input_shape=(args.batch_size, 3, args.image_size, args.image_size),
        print_profile=True,
        module_depth=-1,
        top_modules=3,
        warm_up=1,
    )
    print("{:<30}  {:<8}".format("Batch size: ", args.batch_size))
    print("{:<30}  {:<8}".format("flops: ", flops))
    print("{:<30}  {:<8}".format("Number of MACs: ", macs))
    print("{:<30}  {:<8}".format("Number of parameters: ", params))
    return flops, macs, params


if __name__ == "__main__":
    main()
